import IAPProtocol
import JSONRPC
import ServiceSupport

/// How accounts asks verification about a signed AppTransaction (`verification.verifyAppTransaction`).
public typealias AppTransactionVerifier = @Sendable (String) async throws -> VerificationVerifyAppTransaction.Result

/// Accounts linked to Apple customers: the app sends StoreKit's signed AppTransaction after signing in; verified by the
/// verification service, it links the account to that customer (`appTransactionId`). Offers are decided for the customer
/// (every account linked to it), and support finds a customer's accounts by it.
extension AccountsService {
    /// Apple customers one account may be linked to (a family's devices, a second Apple ID): past it, a new link is refused.
    static let maxLinksPerAccount = 10
    /// Accounts one Apple customer may be linked to (a returning customer's fresh accounts): past it, a new link is refused,
    /// so whoever holds a customer's AppTransaction cannot tie that customer to accounts without end. Checked before the
    /// link is written (two links at the very same moment may pass one over).
    static let maxAccountsPerCustomer = 20

    public func linkAppTransaction(_ p: AccountsLinkAppTransaction.Params) async throws(RPCError) -> AccountsLinkAppTransaction.Result {
        let account = try authenticate(p.session)
        guard let verifier = appTransactionVerifier else {
            throw RPCError(
                code: .unavailable, message: "this accounts service has no verification service to check app transactions",
                reason: "dependencyUnavailable", retryable: true)
        }
        let answer: VerificationVerifyAppTransaction.Result
        do {
            answer = try await verifier(p.signedAppTransaction)
        } catch let error as RPCError where error.knownCode == .invalidParams {
            throw error
        } catch {
            throw RPCError.unavailable("the verification service could not be reached; try again", reason: "dependencyUnavailable")
        }
        guard answer.status == 0, let payload = answer.appTransaction, let app = AppleAppTransaction(payload),
            let environment = answer.environment
        else {
            throw RPCError.invalidReceipt(
                status: answer.status, reason: answer.reason ?? "invalidAppTransaction",
                detail: "the app transaction failed verification (status \(answer.status))")
        }
        let accountId = account.accountId
        let links = try await run { try await self.store.appTransactionLinks(accountId: accountId, appTransactionId: nil) }
        let own = Set(links.filter { $0.accountId == accountId }.map(\.appTransactionId))
        // Linked already: nothing to write.
        if own.contains(app.appTransactionId) { return .init(appTransactionId: app.appTransactionId) }
        guard own.count < Self.maxLinksPerAccount else {
            throw RPCError.conflict(
                "this account is linked to \(own.count) Apple customers already, the most it may be", reason: "tooManyLinks")
        }
        // Per environment: links an Xcode-signed app transaction (with --allow-xcode, anyone can make one naming any id) makes
        // never take a Production customer's places.
        let customer = try await run { try await self.store.appTransactionLinks(accountId: nil, appTransactionId: app.appTransactionId) }
            .filter { $0.environment == environment }
        guard customer.count < Self.maxAccountsPerCustomer else {
            throw RPCError.conflict("this Apple customer is linked to \(customer.count) accounts already, the most it may be", reason: "tooManyLinks")
        }
        let now = clock.nowMs
        try await run {
            try await self.store.linkAppTransaction(
                accountId: accountId, appTransactionId: app.appTransactionId, environment: environment, nowMs: now)
        }
        logger.info(
            "account linked to an Apple customer",
            metadata: ["accountId": "\(accountId)", "appTransactionId": "\(app.appTransactionId)", "environment": "\(environment)"])
        return .init(appTransactionId: app.appTransactionId)
    }

    /// Internal: an account's Apple customers and every account linked to them, or one customer's accounts.
    public func appleCustomer(_ p: AccountsAppleCustomer.Params) async throws(RPCError) -> AccountsAppleCustomer.Result {
        try TokenGate.internal.check(p.internalToken, configured: configuration.internalToken)
        guard (p.accountId == nil) != (p.appTransactionId == nil) else {
            throw RPCError.invalidParams("give accountId or appTransactionId (one of them)", field: "accountId", reason: "invalidValue")
        }
        let links = try await run { try await self.store.appTransactionLinks(accountId: p.accountId, appTransactionId: p.appTransactionId) }
        return .init(links: links)
    }
}
