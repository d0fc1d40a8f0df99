import Foundation
import IAPProtocol

/// The statements a notification's transaction needs beyond the grant rules' (`NotificationRules`), both engines.
extension FulfillmentRecords {
    /// What this database holds about the purchase the facts decide on.
    func stored(for facts: NotificationRules.Facts) throws -> NotificationRules.Stored {
        var stored = NotificationRules.Stored()
        // Only news about a transaction's standing reads the purchase's records (`NotificationRules.bringToAppleState`).
        if let purchase = facts.purchase, facts.disposition == .bringToAppleState {
            stored.processed = try processed(purchase.transactionId)
            stored.owner = try owner(original: purchase.originalTransactionId)
            // A share of a coin grant refunded (Apple's prorated refund, Google's refunded units), or a refund Apple may have
            // reversed (its reversal, or its current state): what the grant gave decides what is taken or given back.
            let partlyRefunded = purchase.proratedRefundMilli != nil || (purchase.play?.purchasedQuantity).map { purchase.quantity < $0 } == true
            let mayReverse = purchase.play == nil && (facts.type == .refundReversed || facts.current != nil)
            if partlyRefunded || mayReverse {
                stored.grantedCoins = try grantedCoins(purchase.transactionId)
                stored.grantedUnits = try s.value("SELECT units FROM processed_transaction WHERE transaction_id = ?1", purchase.transactionId)
            }
            // Only a word that the purchase stands is weighed against Apple's latest refund (`bringToAppleState`).
            if mayReverse, purchase.cancellationDateMs == nil { stored.refundSignedMs = try refundSignedMs(purchase.transactionId) }
            if facts.current == nil {
                stored.latestStandingAppliedMs = try InboxRecords(s).latestAppliedSignedDate(
                    purchase.originalTransactionId, types: NotificationDisposition.standingTypes)
            }
        }
        if let renewal = facts.renewal { stored.keptRenewalSignedMs = try self.renewal(renewal.originalTransactionId)?.signedDateMs }
        return stored
    }

    func apply(_ effect: NotificationRules.Effect, owed: AppleFollowUps, nowMs: Int64) throws {
        switch effect {
        case .keepRenewal(let state): _ = try keepRenewal(state, nowMs: nowMs)
        case .revoke(let transactionId, let reason): _ = try GrantRules.revoke(transactionId, reason: reason, nowMs: nowMs, in: self)
        case .rememberEarlyRevocation(let transactionId, let reason, let share):
            try rememberEarlyRevocation(transactionId, reason: reason, refundShareMilli: share, nowMs: nowMs)
        case .reinstate(let transactionId): _ = try GrantRules.reinstate(transactionId, nowMs: nowMs, in: self)
        case .grant(let purchase, let accountId, let scope, let rule, let appAccountToken):
            _ = try GrantRules.apply(
                [PlannedPurchase(purchase: purchase, rule: rule, scope: scope)], accountId: accountId, appAccountToken: appAccountToken,
                owed: owed.intersection([.finishes, .playAcknowledgements]), mode: .redeem, policy: .refuse, answerScope: scope, nowMs: nowMs,
                in: self)
        case .moveSubscriptionEnd(let original, let expiresAtMs):
            _ = try GrantRules.extendRenewal(original: original, expiresAtMs: expiresAtMs, nowMs: nowMs, in: self)
        case .takeBackRefundedUnits(let transactionId, let keepCoins):
            _ = try GrantRules.takeBackRefundedUnits(transactionId, keepCoins: keepCoins, nowMs: nowMs, in: self)
        case .shortenPass(let transactionId, let keepUnits, let ofUnits, let unitMs):
            _ = try GrantRules.shortenPass(transactionId, keepUnits: keepUnits, ofUnits: ofUnits, unitMs: unitMs, nowMs: nowMs, in: self)
        case .endSubscription(let original, let replacement, let atMs):
            _ = try GrantRules.endSubscription(original: original, replacement: replacement, atMs: atMs, nowMs: nowMs, in: self)
        case .recordExtensionSummary(let summary):
            try FulfillmentQueries(s).recordAudit(
                NotificationRules.summaryAction, accountId: nil, transactionId: summary.requestIdentifier,
                reason: String(decoding: try JSONEncoder().encode(summary), as: UTF8.self), credential: "apple", nowMs: nowMs)
        case .answerConsumption(let transactionId, let answer):
            try enqueueOutbox(
                kind: .consumptionInformation, key: transactionId, payload: String(decoding: try JSONEncoder().encode(answer), as: UTF8.self),
                nowMs: nowMs)
        }
    }

    /// Keeps a subscription's renewal state, forward only: an older signed state than the one kept changes nothing.
    func keepRenewal(_ state: RenewalState, nowMs: Int64) throws -> Bool {
        let kept = try renewal(state.originalTransactionId)
        if let kept, kept.signedDateMs > state.signedDateMs { return false }
        try s.run(
            """
            INSERT INTO subscription_renewal (original_transaction_id, auto_renew, auto_renew_product_id, in_billing_retry,
                grace_period_expires_at_ms, expiration_intent, price_increase_status, signed_date_ms)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
            ON CONFLICT (original_transaction_id) DO UPDATE SET auto_renew = excluded.auto_renew,
                auto_renew_product_id = excluded.auto_renew_product_id, in_billing_retry = excluded.in_billing_retry,
                grace_period_expires_at_ms = excluded.grace_period_expires_at_ms, expiration_intent = excluded.expiration_intent,
                price_increase_status = excluded.price_increase_status, signed_date_ms = excluded.signed_date_ms
            """, state.originalTransactionId, state.autoRenew, state.autoRenewProductId, state.inBillingRetry,
            state.gracePeriodExpiresAtMs, state.expirationIntent, state.priceIncreaseStatus, state.signedDateMs)
        let changes = RenewalChanges.events(from: kept, to: state)
        if !changes.isEmpty, let record = try entitlement(original: state.originalTransactionId) {
            for type in changes {
                try event(type, about: record, nowMs: nowMs) { e in
                    e.willRenew = state.autoRenew && !state.inBillingRetry
                    e.gracePeriodEndsAtMs = state.inBillingRetry ? state.gracePeriodExpiresAtMs : nil
                    e.expirationIntent = type == .subscriptionExpired ? state.expirationIntent : nil
                }
            }
        }
        return true
    }

    /// A refund or revocation of a purchase not redeemed here yet: its redeem records it refunded. The first decision about
    /// the transaction id here, so it claims it (`claim`), unless something already did (an earlier refund, or a refunded
    /// renewal this notification recorded): a redeem that commits meanwhile makes this one run again and revoke. Remembered
    /// twice, a whole refund wins over a prorated one's share (a redeem then takes the whole grant back).
    func rememberEarlyRevocation(_ transactionId: String, reason: String, refundShareMilli: Int64? = nil, nowMs: Int64) throws {
        let claimed: Int64? = try s.value("SELECT 1 FROM transaction_claim WHERE transaction_id = ?1", transactionId)
        if claimed == nil { try claim(transactionId) }
        try s.run(
            """
            INSERT INTO early_revocation (transaction_id, reason, recorded_at_ms, refund_share_milli) VALUES (?1, ?2, ?3, ?4)
            ON CONFLICT (transaction_id) DO UPDATE SET refund_share_milli = NULL WHERE excluded.refund_share_milli IS NULL
            """, transactionId, reason, nowMs, refundShareMilli)
    }
}
