import IAPProtocol
import JSONRPC

extension FulfillmentService {
    /// At most this many receipt purchases are looked up one by one at Apple per redeem; more are read from the
    /// customer's history in one go.
    static let receiptLookupsPerRedeem = 4

    /// A receipt carries no appAccountToken, so whoever redeems a copied receipt first would own its purchases. With
    /// the App Store Server API, every Production receipt purchase nobody here owns yet is looked up at Apple and
    /// carries the token Apple holds for it (the one the buyer's app set at purchase), so `GrantRules` refuses another
    /// account's purchase (`ownedByAnotherAccount`) as it refuses a signed transaction made for another account.
    /// Sandbox value is free and isolated: not looked up. Bounded per call (four lookups or one history read) and
    /// remembered for ten minutes, so a receipt sent again and again costs Apple nothing more. Without the API: first
    /// redeemer wins (documented).
    func withTokensHeldAtApple(_ purchases: [VerifiedPurchase]) async throws(RPCError) -> [VerifiedPurchase] {
        guard let internalToken = configuration.internalToken else { return purchases }
        let now = clock.nowMs
        // One lookup per original (a subscription's renewals carry its token), the latest transaction of each.
        var latest: [String: VerifiedPurchase] = [:]
        for p in purchases where p.appAccountToken == nil && p.environment == "Production" {
            if let known = latest[p.originalTransactionId], known.purchaseDateMs >= p.purchaseDateMs { continue }
            latest[p.originalTransactionId] = p
        }
        var held: [String: String] = [:]
        var unknown: [String] = []
        for original in latest.keys.sorted() {
            if let token = receiptTokenCache.value(original, nowMs: now) {
                held[original] = token
            } else if try await storeCall({ try await self.store.owner(originalTransactionId: original) }) == nil {
                unknown.append(original)
            }
        }
        if let first = unknown.first.flatMap({ latest[$0] }) {
            var answers: [VerificationVerifyTransaction.Result] = []
            do {
                if unknown.count <= Self.receiptLookupsPerRedeem {
                    for original in unknown {
                        guard let id = latest[original]?.transactionId else { continue }
                        do {
                            answers.append(try await dependencies.transactionInfo(id, internalToken: internalToken))
                        } catch  where error.knownCode == .notFound || error.knownCode == .invalidReceipt {
                            continue  // Apple does not know it: no token is held there
                        }
                    }
                } else {
                    answers = try await dependencies.transactionHistory(first.transactionId, internalToken: internalToken)
                }
            } catch  where error.has(.appStoreAPINotConfigured) {
                return purchases
            }
            var found: [String: String] = [:]
            for answer in answers where answer.status == 0 {
                guard let transaction = answer.transaction.flatMap(AppleTransaction.init), latest[transaction.originalTransactionId] != nil
                else { continue }
                found[transaction.originalTransactionId] = transaction.appAccountToken ?? ""
            }
            for original in unknown {
                let token = found[original] ?? ""
                receiptTokenCache.keep(token, for: original, nowMs: now)
                held[original] = token
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
