import IAPProtocol

/// A subscription's end moved after it was granted: by a renewal state (billing grace), by Apple (an extension), or by
/// Google (a plan replaced by an upgrade or downgrade).
extension GrantRules {
    /// Whether an entitlement counts now: permanent, not yet ended, or a subscription whose renewal charge
    /// failed and that is inside Apple's billing grace period.
    public static func isActive(_ record: EntitlementRecord, renewal: RenewalState?, nowMs: Int64) -> Bool {
        guard record.revokedAtMs == nil else { return false }
        guard let expires = record.expiresAtMs, expires <= nowMs else { return true }
        guard let renewal, renewal.inBillingRetry, let grace = renewal.gracePeriodExpiresAtMs else { return false }
        return grace > nowMs
    }

    /// A renewal date Apple moved later (an extension): the entitlement of the original ends then, if it
    /// is not revoked and ended earlier. True if anything changed.
    public static func extendRenewal(original: String, expiresAtMs: Int64, nowMs: Int64, in tx: some FulfillmentTransaction) throws -> Bool {
        guard var current = try tx.entitlement(original: original), current.revokedAtMs == nil,
            let expires = current.expiresAtMs, expires < expiresAtMs
        else { return false }
        current.expiresAtMs = expiresAtMs
        try tx.updateEntitlement(current)
        try tx.event(.subscriptionExtended, about: current, nowMs: nowMs)
        return true
    }

    /// Ends a subscription replaced by another (Google Play's upgrades and downgrades): its access stops at `atMs` (not
    /// before it began); false when it already ended by then or is revoked, or when the replacement is not granted here in
    /// the same scope and live: a plan is never ended for a replacement that was refused. The replacement's account may be
    /// another: Google links a purchase only to the same Google account's plan, which it then stops charging for, so the
    /// customer who upgraded signed in as someone else must not keep the old plan there for free.
    public static func endSubscription(
        original: String, replacement: String, atMs: Int64, nowMs: Int64, in tx: some FulfillmentTransaction
    ) throws -> Bool {
        guard var current = try tx.entitlement(original: original), current.revokedAtMs == nil,
            let expires = current.expiresAtMs, expires > atMs,
            let successor = try tx.entitlement(original: replacement), successor.revokedAtMs == nil,
            successor.holder.scope == current.holder.scope
        else { return false }
        current.expiresAtMs = max(atMs, current.startsAtMs)
        try tx.updateEntitlement(current)
        try tx.event(.subscriptionExpired, about: current, nowMs: nowMs)
        return true
    }

    /// A subscription period before a later one recorded here and not revoked (a refund of last month's renewal, or of the
    /// yearly period an upgrade replaced; later is bought later: `laterPeriodHeld`): taking it back takes only that period,
    /// which is over, and leaves the access the later one paid for.
    /// (A store's refund only: an administrator revoking a past period means the access too.)
    static func pastPeriod(_ record: ProcessedTransaction, _ transactionId: String, in tx: some FulfillmentTransaction) throws -> Bool {
        guard record.grantKind == GrantRule.subscription(entitlement: "").kind, let ends = record.expiresDateMs else { return false }
        return try tx.laterPeriodHeld(
            environment: record.environment, original: record.originalTransactionId, than: transactionId, endsAtMs: ends, revoked: false)
    }

    /// A subscription period whose refund is reversed while a period bought as late or later is still revoked: that revocation
    /// (a store's refund of it, an administrator's) holds the access, which the reversal does not give back.
    static func laterRevocationHeld(_ record: ProcessedTransaction, _ transactionId: String, in tx: some FulfillmentTransaction) throws -> Bool {
        guard record.grantKind == GrantRule.subscription(entitlement: "").kind, let ends = record.expiresDateMs else { return false }
        return try tx.laterPeriodHeld(
            environment: record.environment, original: record.originalTransactionId, than: transactionId, endsAtMs: ends, revoked: true)
    }

    /// Moves a subscription's end to this transaction's expiry if that is later (a renewal); a period bought after a
    /// revocation, or after every period revoked here, reinstates access. A period of another plan of the group switches the entitlement to
    /// that plan's when it is the latest bought, wherever it ends: Apple's upgrade starts at once and, to a shorter plan,
    /// ends before the period it replaces (whose rest Apple refunds); a downgrade or crossgrade starts at the renewal. A
    /// period of the plan it replaced, arriving late, changes nothing. (Until 2026-11-30 only a later end switched: an
    /// upgrade from a yearly plan to a monthly one was never applied, and a late yearly period switched back.) True if
    /// anything changed.
    static func extendSubscription(
        _ p: VerifiedPurchase, entitlement name: String, nowMs: Int64, in tx: some FulfillmentTransaction
    ) throws -> Bool {
        guard let expires = p.expiresDateMs, var current = try tx.entitlement(original: p.originalTransactionId) else { return false }
        if let revokedAt = current.revokedAtMs, revokedAt >= p.purchaseDateMs {
            // Bought before the access was taken here: held back only by a revoked period bought as late or later (or an
            // administrator's revocation), not by the refund of an earlier one processed first (the yearly period an
            // upgrade replaced, refunded before the upgrade's notification came: until 2026-11-30 the upgrade was lost).
            guard
                try !tx.laterPeriodHeld(
                    environment: p.environment, original: p.originalTransactionId, than: p.transactionId, endsAtMs: expires, revoked: true)
            else { return false }
        }
        let planChanged = current.productId != p.productId
        if planChanged {
            guard
                try !tx.laterPurchaseHeld(
                    environment: p.environment, original: p.originalTransactionId, afterMs: p.purchaseDateMs, other: p.transactionId)
            else { return false }
        } else {
            guard current.expiresAtMs.map({ $0 < expires }) ?? true else { return false }
        }
        current.entitlement = name
        current.productId = p.productId
        current.expiresAtMs = expires
        current.revokedAtMs = nil
        try tx.updateEntitlement(current)
        try tx.event(planChanged ? .subscriptionPlanChanged : .subscriptionRenewed, about: current, nowMs: nowMs) {
            $0.transactionId = p.transactionId
        }
        return true
    }
}
