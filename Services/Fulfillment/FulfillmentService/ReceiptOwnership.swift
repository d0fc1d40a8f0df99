import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers

extension FulfillmentService {
    /// Lookups per redeem not charged to the account's budget of Apple calls; each one past them is (a receipt with
    /// many unowned purchases is redeemed over several calls: the answers already read are kept).
    static let freeReceiptLookupsPerRedeem = 4

    /// A receipt carries no appAccountToken, so whoever redeems a copied receipt first would own its purchases. With
    /// the App Store Server API, every Production receipt purchase nobody here owns yet is looked up at Apple (Get
    /// Transaction Info of its latest transaction) and carries the token Apple holds for it (the one the buyer's app
    /// set at purchase), so `GrantRules` refuses another account's purchase (`ownedByAnotherAccount`) as it refuses a
    /// signed transaction made for another account. Sandbox value is free and isolated: not looked up.
    ///
    /// Only an answer says "no token": Apple's transaction without one, or Apple not knowing the transaction. Any
    /// other failure fails the redeem (`unavailable`, retryable, nothing written) and is not remembered. Answers are
    /// kept ten minutes and concurrent redeems of one purchase share one call, so a receipt sent again and again, or
    /// by many devices at once, costs Apple one call. Without the API: first redeemer wins (documented).
    func withTokensHeldAtApple(_ purchases: [VerifiedPurchase], accountId: String) async throws(RPCError) -> [VerifiedPurchase] {
        guard let internalToken = configuration.internalToken else { return purchases }
        // One lookup per original (a subscription's renewals carry its token), the latest transaction of each.
        var latest: [String: VerifiedPurchase] = [:]
        for p in purchases where p.appAccountToken == nil && p.environment == "Production" {
            if let known = latest[p.originalTransactionId], known.purchaseDateMs >= p.purchaseDateMs { continue }
            latest[p.originalTransactionId] = p
        }
        var held: [String: String] = [:]
        var lookups = 0
        for original in latest.keys.sorted() {
            if let token = receiptTokenCache.value(original, nowMs: clock.nowMs) {
                held[original] = token
                continue
            }
            guard try await storeCall({ try await self.store.owner(originalTransactionId: original) }) == nil,
                let transactionId = latest[original]?.transactionId
            else { continue }
            lookups += 1
            if lookups > Self.freeReceiptLookupsPerRedeem, !receiptTokenLookups.isRunning(original),
                let wait = appleCalls.take(accountId)
            {
                throw RPCError.rateLimited(
                    retryAfterMs: Int64((wait * 1000).rounded(.up)),
                    detail: "this receipt holds more purchases than this account's budget of calls to Apple covers at once")
            }
            let dependencies = self.dependencies
            let clock = self.clock
            let answer = await receiptTokenLookups.answer(original, nowMs: { clock.nowMs }) { () async -> Result<String, RPCError> in
                do throws(RPCError) {
                    let result = try await dependencies.transactionInfo(transactionId, internalToken: internalToken)
                    guard result.status == 0, let transaction = result.transaction.flatMap(AppleTransaction.init),
                        transaction.originalTransactionId == original
                    else {
                        return .failure(
                            .unavailable("Apple's answer for a receipt purchase could not be verified", reason: "verificationUnavailable"))
                    }
                    return .success(transaction.appAccountToken ?? "")
                } catch  where error.knownCode == .notFound {
                    return .success("")  // Apple does not know it: no token is held there
                } catch {
                    return .failure(error)
                }
            }
            switch answer {
            case .success(let token):
                held[original] = token
            case .failure(let error) where error.has(RPCErrorReason.appStoreAPINotConfigured):
                return purchases
            case .failure(let error):
                throw error.knownCode == .rateLimited || error.knownCode == .unavailable
                    ? error
                    : RPCError.unavailable(
                        "Apple could not be asked who holds a receipt purchase: \(error.message)", reason: "verificationUnavailable")
            }
        }
        return purchases.map { purchase in
            var purchase = purchase
            if purchase.appAccountToken == nil, let token = held[purchase.originalTransactionId], !token.isEmpty {
                purchase.appAccountToken = token
            }
            return purchase
        }
    }
}

/// Receipt purchases being looked up at Apple, by original transaction: a redeem that needs a lookup already running
/// waits for its answer instead of asking Apple again, and an answer is kept (`AppleAnswerCache`) before the lookup
/// stops running, so no redeem can start a second one in between.
final class ReceiptTokenLookups: Sendable {
    private let running = NIOLockedValueBox<[String: Task<Result<String, RPCError>, Never>]>([:])
    private let answers: AppleAnswerCache<String>

    init(answers: AppleAnswerCache<String>) { self.answers = answers }

    func isRunning(_ original: String) -> Bool { running.withLockedValue { $0[original] != nil } }

    /// The kept answer for `original`, else the running lookup's, else `lookup`'s, started here. Only successes are kept.
    func answer(_ original: String, nowMs: @escaping @Sendable () -> Int64, lookup: @escaping @Sendable () async -> Result<String, RPCError>)
        async -> Result<String, RPCError>
    {
        let answers = self.answers
        let running = self.running
        enum Found { case kept(String), lookup(Task<Result<String, RPCError>, Never>) }
        let found = running.withLockedValue { all -> Found in
            if let kept = answers.value(original, nowMs: nowMs()) { return .kept(kept) }
            if let task = all[original] { return .lookup(task) }
            // Unstructured on purpose: the lookup belongs to every redeem waiting for it, not to the one that started it.
            let task = Task { () -> Result<String, RPCError> in
                let answer = await lookup()
                running.withLockedValue { all in
                    if case .success(let token) = answer { answers.keep(token, for: original, nowMs: nowMs()) }
                    all[original] = nil
                }
                return answer
            }
            all[original] = task
            return .lookup(task)
        }
        switch found {
        case .kept(let token): return .success(token)
        case .lookup(let task): return await task.value
        }
    }
}
