import IAPProtocol
import JSONRPC
import NIOCore
import RPCTransport

/// What fulfillment asks the other services: who the caller is, whether a purchase is real, what a
/// product grants. `Dependencies` asks them over RPC; fast tests use a fake.
public protocol FulfillmentDependencies: Sendable {
    func authenticate(_ session: String) async throws(RPCError) -> AuthenticatedAccount
    /// The account an appAccountToken belongs to (internal method); nil when no account has it.
    func account(appAccountToken: String, internalToken: String) async throws(RPCError) -> String?
    func verifyReceipt(_ params: VerificationVerifyReceipt.Params) async throws(RPCError) -> VerifyReceiptResponse
    func verifyTransaction(_ jws: String) async throws(RPCError) -> VerificationVerifyTransaction.Result
    func verifyNotification(_ payload: String) async throws(RPCError) -> VerificationVerifyNotification.Result
    func products(_ ids: [String]) async throws(RPCError) -> CatalogGetProducts.Result
    /// The products Google Play sells under these Play product ids (`GooglePlayProductIds`).
    func playProducts(_ playIds: [String]) async throws(RPCError) -> CatalogGetProducts.Result
    /// A transaction fetched from Apple (App Store Server API) through verification, verified.
    func transactionInfo(_ transactionId: String, internalToken: String) async throws(RPCError) -> VerificationVerifyTransaction.Result
    /// A customer's whole history from Apple through verification, each transaction verified.
    func transactionHistory(_ transactionId: String, internalToken: String) async throws(RPCError) -> [VerificationVerifyTransaction.Result]
    /// An order's transactions from Apple through verification, each verified.
    func lookUpOrder(_ orderId: String, internalToken: String) async throws(RPCError) -> [VerificationVerifyTransaction.Result]
    /// An account by username (internal method of accounts).
    func account(username: String, internalToken: String) async throws(RPCError) -> AccountsFindByUsername.Result
    /// Ties an original transaction to an account's token at Apple.
    func setAppAccountToken(originalTransactionId: String, appAccountToken: String, internalToken: String) async throws(RPCError)
    /// Marks a transaction finished at Apple (Finish Transaction).
    func finishTransaction(_ transactionId: String, internalToken: String) async throws(RPCError)
    /// Extends a subscription's renewal date at Apple.
    func extendRenewalDate(_ params: VerificationExtendRenewalDate.Params) async throws(RPCError) -> VerificationExtendRenewalDate.Result
    /// One page of Apple's notification history.
    func notificationHistory(_ params: VerificationNotificationHistory.Params) async throws(RPCError) -> VerificationNotificationHistory.Result
    /// Every subscription of the customer of a transaction, with status and renewal info.
    func subscriptionStatuses(_ transactionId: String, internalToken: String) async throws(RPCError) -> [AppleSubscriptionStatus]
    /// An account's consent to consumption data going to Apple, its age and appAccountToken (accounts, internal).
    func consumptionProfile(accountId: String, internalToken: String) async throws(RPCError) -> AccountsConsumptionProfile.Result
    /// Ends every session of the account at accounts (support's sign-out from all devices).
    func revokeSessions(accountId: String, internalToken: String) async throws(RPCError) -> Int
    /// Send Consumption Information, through verification.
    func sendConsumption(_ params: VerificationSendConsumption.Params) async throws(RPCError)
    /// Every link of the Apple customers an account is linked to by app transaction (accounts, internal).
    func appleCustomer(accountId: String, internalToken: String) async throws(RPCError) -> [AppTransactionLink]
    /// Extends every active subscriber of a product at Apple, through verification.
    func massExtendRenewalDate(_ params: VerificationMassExtendRenewalDate.Params) async throws(RPCError)
        -> VerificationMassExtendRenewalDate.Result
    /// A mass extension's status at Apple, through verification.
    /// Retention Messaging: a Get Retention Message request verified; a subscription's rules, offers and group.
    func verifyRealtimeRequest(_ payload: String) async throws(RPCError) -> VerificationVerifyRealtimeRequest.Result
    func retention(productId: String, internalToken: String) async throws(RPCError) -> CatalogGetRetention.Result
    func massExtensionStatus(_ params: VerificationMassExtensionStatus.Params) async throws(RPCError) -> MassExtensionStatus
    /// A Google Play purchase checked with Google through verification (internal).
    func verifyPlayPurchase(_ params: PlayPurchaseReference) async throws(RPCError) -> VerifiedPlayPurchase
    /// Acknowledges (or consumes) a Google Play purchase at Google through verification (internal).
    func acknowledgePlayPurchase(_ params: VerificationAcknowledgePlayPurchase.Params) async throws(RPCError)
    /// A Google Play notification's Pub/Sub push verified (its OIDC token) and read, through verification (internal).
    func verifyPlayPush(_ params: PlayPushDelivery) async throws(RPCError) -> VerifiedPlayPush
    /// Google Play purchases voided since a time, a page at a time, through verification (internal).
    func playVoidedPurchases(_ params: VerificationPlayVoidedPurchases.Params) async throws(RPCError) -> VerificationPlayVoidedPurchases.Result
}

/// The three services fulfillment calls, each with a bounded deadline per call. A dependency that is
/// down, slow or failing makes the request fail with `unavailable` (retryable) before anything is
/// written; a dependency's verdict about the caller (an unknown session) is passed through.
public struct Dependencies: FulfillmentDependencies {
    public let accounts: RPCClient
    public let verification: RPCClient
    public let catalog: RPCClient
    /// The longest one call to a dependency may take.
    public let deadline: TimeAmount
    /// The suite's internal token, presented on `accounts.authenticate` (the other internal calls take theirs as a parameter).
    public var internalToken: String?

    public init(accounts: RPCClient, verification: RPCClient, catalog: RPCClient, deadline: TimeAmount = .seconds(3)) {
        self.accounts = accounts
        self.verification = verification
        self.catalog = catalog
        self.deadline = deadline
    }

    /// Addresses as `host:port` or `host:port,host:port` (IAP_ACCOUNTS_ADDR and friends); a pool of `connections`
    /// per instance; `tls` for services that listen with TLS.
    public init(
        accounts: String, verification: String, catalog: String, connections: Int = 4,
        deadline: TimeAmount = .seconds(3), tls: RPCClientTLS? = nil
    ) throws(RPCError) {
        let config = RPCClientConfiguration(connections: connections, callTimeout: deadline, tls: tls)
        self.init(
            accounts: try RPCClient(address: accounts, configuration: config),
            verification: try RPCClient(address: verification, configuration: config),
            catalog: try RPCClient(address: catalog, configuration: config), deadline: deadline)
    }

    /// Keyed by the session when it has a session token's shape (`SessionToken.shaped`, as the edge keys), so each
    /// session's lookups go to one accounts instance, whose cache of sessions answers them (`RPCClient` affinity;
    /// otherwise every instance's cache would come to hold every session).
    public func authenticate(_ session: String) async throws(RPCError) -> AuthenticatedAccount {
        try await call(
            "accounts", accounts, AccountsAuthenticate.self, .init(session: session, internalToken: internalToken),
            affinity: SessionToken.shaped(session.utf8), passThrough: [.unauthenticated])
    }

    /// The account an appAccountToken belongs to (internal method); nil when no account has it.
    public func account(appAccountToken: String, internalToken: String) async throws(RPCError) -> String? {
        do {
            return try await accounts.call(
                AccountsFindByAppAccountToken.self,
                .init(appAccountToken: appAccountToken, internalToken: internalToken), timeout: deadline
            ).accountId
        } catch  where error.knownCode == .notFound {
            return nil
        } catch {
            throw Self.unavailable("accounts", error)
        }
    }

    public func verifyReceipt(_ params: VerificationVerifyReceipt.Params) async throws(RPCError) -> VerifyReceiptResponse {
        try await call("verification", verification, VerificationVerifyReceipt.self, params)
    }

    public func verifyTransaction(_ jws: String) async throws(RPCError) -> VerificationVerifyTransaction.Result {
        try await call("verification", verification, VerificationVerifyTransaction.self, .init(signedTransaction: jws))
    }

    public func verifyNotification(_ payload: String) async throws(RPCError) -> VerificationVerifyNotification.Result {
        try await call("verification", verification, VerificationVerifyNotification.self, .init(signedPayload: payload))
    }

    public func products(_ ids: [String]) async throws(RPCError) -> CatalogGetProducts.Result {
        try await call("catalog", catalog, CatalogGetProducts.self, .init(productIds: ids))
    }

    public func playProducts(_ playIds: [String]) async throws(RPCError) -> CatalogGetProducts.Result {
        try await call("catalog", catalog, CatalogGetProducts.self, .init(productIds: [], googlePlayProductIds: playIds))
    }

    public func verifyPlayPurchase(_ params: PlayPurchaseReference) async throws(RPCError) -> VerifiedPlayPurchase {
        try await call(
            "verification", verification, VerificationVerifyPlayPurchase.self, params, passThrough: [.notFound, .invalidParams, .invalidReceipt])
    }

    public func acknowledgePlayPurchase(_ params: VerificationAcknowledgePlayPurchase.Params) async throws(RPCError) {
        _ = try await call(
            "verification", verification, VerificationAcknowledgePlayPurchase.self, params, passThrough: [.notFound, .conflict, .invalidReceipt])
    }

    public func verifyPlayPush(_ params: PlayPushDelivery) async throws(RPCError) -> VerifiedPlayPush {
        try await call("verification", verification, VerificationVerifyPlayPush.self, params, passThrough: [.invalidReceipt])
    }

    public func playVoidedPurchases(_ params: VerificationPlayVoidedPurchases.Params) async throws(RPCError)
        -> VerificationPlayVoidedPurchases.Result
    {
        try await call("verification", verification, VerificationPlayVoidedPurchases.self, params)
    }

    public func transactionInfo(_ transactionId: String, internalToken: String) async throws(RPCError)
        -> VerificationVerifyTransaction.Result
    {
        try await call(
            "verification", verification, VerificationTransactionInfo.self, .init(internalToken: internalToken, transactionId: transactionId),
            passThrough: [.notFound, .invalidParams, .invalidReceipt])
    }

    public func transactionHistory(_ transactionId: String, internalToken: String) async throws(RPCError)
        -> [VerificationVerifyTransaction.Result]
    {
        try await call(
            "verification", verification, VerificationTransactionHistory.self, .init(internalToken: internalToken, transactionId: transactionId),
            passThrough: [.notFound, .invalidParams, .invalidReceipt]
        ).transactions
    }

    public func lookUpOrder(_ orderId: String, internalToken: String) async throws(RPCError) -> [VerificationVerifyTransaction.Result] {
        try await call(
            "verification", verification, VerificationLookUpOrder.self, .init(internalToken: internalToken, orderId: orderId),
            passThrough: [.notFound, .invalidParams, .invalidReceipt]
        ).transactions
    }

    public func account(username: String, internalToken: String) async throws(RPCError) -> AccountsFindByUsername.Result {
        try await call(
            "accounts", accounts, AccountsFindByUsername.self, .init(username: username, internalToken: internalToken),
            passThrough: [.notFound, .invalidParams])
    }

    public func setAppAccountToken(originalTransactionId: String, appAccountToken: String, internalToken: String) async throws(RPCError) {
        _ = try await call(
            "verification", verification, VerificationSetAppAccountToken.self,
            .init(internalToken: internalToken, originalTransactionId: originalTransactionId, appAccountToken: appAccountToken),
            passThrough: [.notFound, .invalidParams])
    }

    public func finishTransaction(_ transactionId: String, internalToken: String) async throws(RPCError) {
        _ = try await call(
            "verification", verification, VerificationFinishTransaction.self, .init(internalToken: internalToken, transactionId: transactionId),
            passThrough: [.notFound, .invalidParams])
    }

    public func extendRenewalDate(_ params: VerificationExtendRenewalDate.Params) async throws(RPCError) -> VerificationExtendRenewalDate.Result {
        try await call("verification", verification, VerificationExtendRenewalDate.self, params, passThrough: [.notFound, .invalidParams, .conflict])
    }

    public func notificationHistory(_ params: VerificationNotificationHistory.Params) async throws(RPCError)
        -> VerificationNotificationHistory.Result
    {
        try await call("verification", verification, VerificationNotificationHistory.self, params, passThrough: [.invalidParams])
    }

    public func subscriptionStatuses(_ transactionId: String, internalToken: String) async throws(RPCError) -> [AppleSubscriptionStatus] {
        try await call(
            "verification", verification, VerificationSubscriptionStatuses.self, .init(internalToken: internalToken, transactionId: transactionId),
            passThrough: [.notFound, .invalidParams]
        ).subscriptions
    }

    public func consumptionProfile(accountId: String, internalToken: String) async throws(RPCError) -> AccountsConsumptionProfile.Result {
        try await call(
            "accounts", accounts, AccountsConsumptionProfile.self, .init(accountId: accountId, internalToken: internalToken), passThrough: [.notFound]
        )
    }

    public func revokeSessions(accountId: String, internalToken: String) async throws(RPCError) -> Int {
        try await call(
            "accounts", accounts, AccountsRevokeSessions.self, .init(accountId: accountId, internalToken: internalToken), passThrough: [.notFound]
        ).ended
    }

    public func sendConsumption(_ params: VerificationSendConsumption.Params) async throws(RPCError) {
        _ = try await call("verification", verification, VerificationSendConsumption.self, params, passThrough: [.notFound, .invalidParams])
    }

    public func appleCustomer(accountId: String, internalToken: String) async throws(RPCError) -> [AppTransactionLink] {
        try await call("accounts", accounts, AccountsAppleCustomer.self, .init(internalToken: internalToken, accountId: accountId)).links
    }

    public func massExtendRenewalDate(_ params: VerificationMassExtendRenewalDate.Params) async throws(RPCError)
        -> VerificationMassExtendRenewalDate.Result
    {
        try await call("verification", verification, VerificationMassExtendRenewalDate.self, params, passThrough: [.invalidParams, .conflict])
    }

    public func massExtensionStatus(_ params: VerificationMassExtensionStatus.Params) async throws(RPCError) -> MassExtensionStatus {
        try await call("verification", verification, VerificationMassExtensionStatus.self, params, passThrough: [.notFound, .invalidParams])
    }

    public func verifyRealtimeRequest(_ payload: String) async throws(RPCError) -> VerificationVerifyRealtimeRequest.Result {
        try await call("verification", verification, VerificationVerifyRealtimeRequest.self, .init(signedPayload: payload))
    }

    public func retention(productId: String, internalToken: String) async throws(RPCError) -> CatalogGetRetention.Result {
        try await call(
            "catalog", catalog, CatalogGetRetention.self, .init(internalToken: internalToken, productId: productId), passThrough: [.notFound])
    }

    /// Health probes of the three, for `health.check`.
    public var probes: [HealthProbe] {
        [accounts.healthProbe(name: "accounts"), verification.healthProbe(name: "verification"), catalog.healthProbe(name: "catalog")]
    }

    public func close() async {
        await accounts.close()
        await verification.close()
        await catalog.close()
    }

    private func call<M: RPCMethod>(
        _ name: String, _ client: RPCClient, _ method: M.Type, _ params: M.Params, affinity: String? = nil,
        passThrough: Set<RPCErrorCode> = []
    ) async throws(RPCError) -> M.Result {
        do {
            return try await client.call(method, params, timeout: deadline, affinity: affinity)
        } catch {
            if let code = error.knownCode, passThrough.contains(code) { throw error }
            // Verification's word that Apple cannot be asked is an answer, not an outage: the caller decides.
            if error.has(.appStoreAPINotConfigured) || error.has(.playAPINotConfigured) { throw error }
            throw Self.unavailable(name, error)
        }
    }

    private static func unavailable(_ name: String, _ error: RPCError) -> RPCError {
        var failure = RPCError.unavailable(
            "\(name) could not answer (\(error.message)); nothing was changed, retry later",
            reason: .dependencyUnavailable)
        failure.data.extra["dependency"] = .string(name)
        failure.data.extra["dependencyCode"] = .int(Int64(error.code))
        return failure
    }
}

extension FulfillmentDependencies {
    /// Fakes of fast tests know no Google: Play purchases cannot be verified there.
    public func verifyPlayPurchase(_ params: PlayPurchaseReference) async throws(RPCError) -> VerifiedPlayPurchase {
        throw RPCError(code: .unavailable, message: "no Google Play here", reason: .playAPINotConfigured)
    }
    public func acknowledgePlayPurchase(_ params: VerificationAcknowledgePlayPurchase.Params) async throws(RPCError) {
        throw RPCError(code: .unavailable, message: "no Google Play here", reason: .playAPINotConfigured)
    }
    public func verifyPlayPush(_ params: PlayPushDelivery) async throws(RPCError) -> VerifiedPlayPush {
        throw RPCError(code: .unavailable, message: "no Google Play here", reason: .playAPINotConfigured)
    }
    public func playProducts(_ playIds: [String]) async throws(RPCError) -> CatalogGetProducts.Result { .init(products: [], missing: []) }
    public func playVoidedPurchases(_ params: VerificationPlayVoidedPurchases.Params) async throws(RPCError)
        -> VerificationPlayVoidedPurchases.Result
    {
        throw RPCError(code: .unavailable, message: "no Google Play here", reason: .playAPINotConfigured)
    }
}
