import IAPProtocol

/// What one App Store Server Notification changes, decided from facts alone: the notification's own signed word,
/// Apple's current word about its transaction, and what this database holds about that transaction. The
/// notification's counterpart of `GrantRules.apply`: `NotificationProcessor` gathers the facts (Apple, the catalog,
/// accounts) before the transaction; storage reads the stored facts, calls `decide`, and applies the effects and the
/// inbox row's outcome in ONE transaction.
///
/// Apple delivers late, twice and out of order, so a notification about a transaction's standing is taken as news
/// that it changed: the transaction is brought to what Apple says NOW (revoked, granted, or given back after a
/// refund), whichever notification arrives and in whatever order. Without Apple's current word the notification's
/// snapshot serves, and one signed before an applied notification about the same purchase's standing is superseded.
public enum NotificationRules {
    /// Gathered before the transaction.
    public struct Facts: Sendable, Equatable {
        public var disposition: NotificationDisposition
        public var type: AppleNotificationType
        /// The notification's signed transaction; nil when it carries none.
        public var snapshot: VerifiedPurchase?
        /// The transaction as Apple has it now; nil when Apple cannot be asked or does not know it.
        public var current: VerifiedPurchase?
        /// Renewal info the notification carries, to keep forward only.
        public var renewal: RenewalState?
        /// When the notification was signed (the inbox row's), for `superseded`.
        public var signedDateMs: Int64?
        /// The scope a purchase of the decided environment grants into; nil: refused (`SandboxPolicy`).
        public var scope: AccountScope?
        /// The catalog's rule for the product; nil when unknown.
        public var rule: GrantRule?
        /// The account whose appAccountToken the purchase carries, if the purchase carries one and accounts knows it.
        public var tokenAccountId: String?
        /// RENEWAL_EXTENSION / SUMMARY: the mass extension's counts.
        public var summary: AppleMassExtensionSummary?
        /// CONSUMPTION_REQUEST: the answer owed to Apple (the account consented, inside Apple's window); nil: none.
        public var consumption: OwedConsumptionAnswer?
        /// Google Play: the subscription purchase this one replaced (`linkedPurchaseToken`: an upgrade, a downgrade), whose
        /// access ends where this one begins, whichever account holds it (`GrantRules.endSubscription`).
        public var replacedOriginal: String?

        public init(
            disposition: NotificationDisposition, type: AppleNotificationType, snapshot: VerifiedPurchase?,
            current: VerifiedPurchase? = nil, renewal: RenewalState? = nil, signedDateMs: Int64? = nil, scope: AccountScope? = nil,
            rule: GrantRule? = nil, tokenAccountId: String? = nil
        ) {
            self.disposition = disposition
            self.type = type
            self.snapshot = snapshot
            self.current = current
            self.renewal = renewal
            self.signedDateMs = signedDateMs
            self.scope = scope
            self.rule = rule
            self.tokenAccountId = tokenAccountId
        }

        /// The purchase decided on: Apple's current word, else the snapshot.
        public var purchase: VerifiedPurchase? { current ?? snapshot }

        /// When Apple signed the word decided on: the later of the notification's and Apple's current copy's.
        var standingSignedMs: Int64? {
            [signedDateMs, current?.signedDateMs].compactMap { $0 }.max()
        }
    }

    /// Read inside the transaction, about `Facts.purchase`.
    public struct Stored: Sendable, Equatable {
        public var processed: ProcessedTransaction?
        public var owner: Holder?
        /// The signed date of the latest applied notification about the original's standing (`standingTypes`).
        public var latestStandingAppliedMs: Int64?
        /// The signed date of the renewal state kept for the original.
        public var keptRenewalSignedMs: Int64?
        /// The coins the transaction's grant gave (its ledger row) and the units it gave them for (what Google counted as
        /// refundable then), read for a Google Play partial refund.
        public var grantedCoins: Int64?
        public var grantedUnits: Int64?
        /// When Apple last signed that the transaction is refunded, as applied here (`FulfillmentTransaction.recordRefundSigned`).
        public var refundSignedMs: Int64?

        public init(
            processed: ProcessedTransaction? = nil, owner: Holder? = nil, latestStandingAppliedMs: Int64? = nil,
            keptRenewalSignedMs: Int64? = nil, grantedCoins: Int64? = nil, grantedUnits: Int64? = nil
        ) {
            self.processed = processed
            self.owner = owner
            self.latestStandingAppliedMs = latestStandingAppliedMs
            self.keptRenewalSignedMs = keptRenewalSignedMs
            self.grantedCoins = grantedCoins
            self.grantedUnits = grantedUnits
        }
    }

    public enum Effect: Sendable, Equatable {
        case keepRenewal(RenewalState)
        case revoke(transactionId: String, reason: String)
        /// Remembered so that the redeem bringing the purchase records it refunded.
        case rememberEarlyRevocation(transactionId: String, reason: String, refundShareMilli: Int64? = nil)
        /// A refund reversed: given back (or, never redeemed, its early revocation forgotten).
        case reinstate(transactionId: String)
        /// Recorded for its account as a redeem would (`GrantRules.apply`, `.refuse` transfers).
        case grant(VerifiedPurchase, accountId: String, scope: AccountScope, rule: GrantRule?, appAccountToken: String?)
        case moveSubscriptionEnd(originalTransactionId: String, expiresAtMs: Int64)
        /// A subscription replaced by another (`replacement`, an original transaction): its access ends at `atMs` (never
        /// extended), only if the replacement was granted to the same holder and is not revoked (applied after the grant).
        case endSubscription(originalTransactionId: String, replacement: String, atMs: Int64)
        /// A mass extension's counts, kept (in the audit log, as Apple's word) for `fulfillment.massExtensionStatus`.
        case recordExtensionSummary(AppleMassExtensionSummary)
        /// Owed to Apple through the outbox: Send Consumption Information about the transaction.
        case answerConsumption(transactionId: String, OwedConsumptionAnswer)
        /// Google Play's quantity-based partial refund: the transaction keeps `keepCoins` of its grant, the rest is taken back
        /// with the debt rules of a refund (`GrantRules.takeBackRefundedUnits`).
        case takeBackRefundedUnits(transactionId: String, keepCoins: Int64)
        /// The same for a pass bought in several units: it keeps `keepUnits` of `ofUnits`, each `unitMs` long
        /// (`GrantRules.shortenPass`).
        case shortenPass(transactionId: String, keepUnits: Int64, ofUnits: Int64, unitMs: Int64)

        public var isGrant: Bool { if case .grant = self { true } else { false } }
    }

    public struct Decision: Sendable, Equatable {
        public var effects: [Effect] = []
        /// Nil: applied; else why nothing (more) was applied (the inbox row's `lastError`).
        public var ignoredBecause: String?
        public var applied: Bool { ignoredBecause == nil }
        /// When Apple signed that the purchase decided on stands (a refund's reversal, or its current copy without a
        /// refund), kept whatever else the decision does (`FulfillmentTransaction.recordStandsSigned`).
        public var standsSignedMs: Int64?
        /// When Apple signed that the purchase decided on is refunded (a REFUND or REVOKE applied), kept likewise.
        public var refundSignedMs: Int64?
    }

    /// The audit log's action for a mass extension's summary (its `transactionId` is the request identifier).
    public static let summaryAction = "massExtensionSummary"

    public static func decide(_ facts: Facts, stored: Stored) -> Decision {
        var decision = Decision()
        if case .ignore(let reason) = facts.disposition {
            decision.ignoredBecause = reason
            return decision
        }
        var renewalKept = false
        if let renewal = facts.renewal, (stored.keptRenewalSignedMs ?? .min) <= renewal.signedDateMs {
            decision.effects.append(.keepRenewal(renewal))
            renewalKept = true
        }
        if facts.disposition == .recordExtensionSummary {
            if let summary = facts.summary {
                decision.effects.append(.recordExtensionSummary(summary))
            } else {
                decision.ignoredBecause = "a mass extension's summary without its request, product, environment or counts"
            }
            return decision
        }
        guard let purchase = facts.purchase else {
            decision.ignoredBecause = "no transaction in the notification"
            return decision
        }
        switch facts.disposition {
        case .bringToAppleState:
            if facts.current == nil, let signed = facts.signedDateMs, let latest = stored.latestStandingAppliedMs, signed < latest {
                decision.ignoredBecause = "superseded: a later notification for this purchase was applied first"
                return decision
            }
            // From the signed snapshot alone, only a reversal gives back what a refund took: an older purchase or renewal
            // notice arriving late says nothing about a refund that came after it.
            // Google never reverses a refund: its word about a purchase revoked here gives nothing back.
            let reinstates = (facts.current != nil && facts.current?.play == nil) || facts.type == .refundReversed
            bringToAppleState(purchase, reason: facts.type == .revoke ? "revoked" : "refunded", reinstates: reinstates, facts, stored, &decision)
        case .moveSubscriptionEnd:
            guard let expires = purchase.expiresDateMs else {
                decision.ignoredBecause = "no expiry"
                return decision
            }
            decision.effects.append(.moveSubscriptionEnd(originalTransactionId: purchase.originalTransactionId, expiresAtMs: expires))
        case .keepRenewalState:
            if !renewalKept { decision.ignoredBecause = "an equal or newer renewal state was already kept" }
        case .answerConsumptionRequest:
            // Decided before the transaction (`NotificationProcessor`): owed to Apple through the outbox, or nothing.
            if let answer = facts.consumption {
                decision.effects.append(.answerConsumption(transactionId: purchase.transactionId, answer))
            } else {
                decision.ignoredBecause = "not answered: no consent, outside Apple's window, or not a purchase made here"
            }
        case .record, .ignore, .recordExtensionSummary:
            break
        }
        return decision
    }

    /// Makes the purchase here what `purchase` says: revoked, or granted (given back if a refund had revoked it).
    /// Any number of deliveries, in any order, end the same.
    private static func bringToAppleState(
        _ purchase: VerifiedPurchase, reason: String, reinstates: Bool, _ facts: Facts, _ stored: Stored, _ decision: inout Decision
    ) {
        if let processed = stored.processed, processed.originalTransactionId != purchase.originalTransactionId {
            // A payload naming another purchase's transaction under its own original neither revokes nor grants it.
            decision.ignoredBecause = "the transaction recorded here belongs to another purchase"
            return
        }
        // Kept only where a refund was: Apple's reversal, or its word on a purchase a refund took here (not one row for
        // every renewal Apple's current copy confirms).
        if reinstates, purchase.cancellationDateMs == nil, let signed = facts.standingSignedMs, let refund = stored.refundSignedMs,
            signed < refund
        {
            // Apple's word that it stands is older than its word that it is refunded (a redeemed copy's, its notification
            // lost): the refund stands. Until 2026-11-30 such a late reversal gave the purchase back.
            decision.ignoredBecause = "superseded: Apple signed a refund of this purchase after it"
            return
        }
        if purchase.cancellationDateMs != nil, purchase.play == nil { decision.refundSignedMs = facts.standingSignedMs }
        let refundedHere = stored.processed.map { p in p.revokedAtMs != nil || stored.grantedCoins.map { p.coinsGranted < $0 } == true } == true
        if reinstates, purchase.cancellationDateMs == nil, purchase.play == nil, facts.type == .refundReversed || refundedHere {
            decision.standsSignedMs = facts.standingSignedMs
        }
        if purchase.cancellationDateMs != nil {
            if let processed = stored.processed {
                if processed.revokedAtMs == nil, let granted = stored.grantedCoins, let keep = purchase.coinsKept(ofGrant: granted) {
                    // Apple refunded a share of a coin purchase (REFUND_PRORATED, from its consumption): that share of the
                    // grant is taken back, the rest stays. State-based: the same notification again takes nothing more.
                    if processed.coinsGranted > keep {
                        decision.effects.append(.takeBackRefundedUnits(transactionId: purchase.transactionId, keepCoins: keep))
                    } else {
                        decision.ignoredBecause = "its refunded share was already taken back"
                    }
                    return
                }
                decision.effects.append(.revoke(transactionId: purchase.transactionId, reason: reason))
                return
            }
            // Never seen here: remembered (a reversal later grants it in full). A refunded renewal of a subscription
            // owned here also takes back the access its original granted.
            if purchase.transactionId != purchase.originalTransactionId, stored.owner != nil, let grant = grant(purchase, facts, stored) {
                decision.effects.append(grant)
            }
            decision.effects.append(
                .rememberEarlyRevocation(transactionId: purchase.transactionId, reason: reason, refundShareMilli: purchase.proratedRefundMilli))
            return
        }
        if let processed = stored.processed, let bought = purchase.play?.purchasedQuantity, purchase.quantity < bought,
            processed.revokedAtMs == nil
        {
            partialRefund(purchase, processed, bought: bought, rule: facts.rule, stored, &decision)
            return
        }
        if let processed = stored.processed, reinstates, purchase.play == nil, processed.revokedAtMs == nil,
            let granted = stored.grantedCoins, processed.coinsGranted < granted
        {
            // Apple reversed a prorated refund (no revocation any more): the share it took back is given back, once.
            decision.effects.append(.reinstate(transactionId: purchase.transactionId))
            return
        }
        if let processed = stored.processed, processed.revokedAtMs != nil {
            if reinstates {
                decision.effects.append(.reinstate(transactionId: purchase.transactionId))
            } else {
                decision.ignoredBecause = "revoked here; only a refund reversal gives it back"
            }
            return
        }
        if stored.processed == nil, reinstates { decision.effects.append(.reinstate(transactionId: purchase.transactionId)) }
        guard let grant = grant(purchase, facts, stored) else {
            decision.ignoredBecause = "its account is not known here (no owner, no matching appAccountToken)"
            return
        }
        decision.effects.append(grant)
        if stored.processed != nil, purchase.play?.kind == .subscription, let expires = purchase.expiresDateMs {
            // Google moves a period's end without a new order (a grace period while a payment is retried): the access
            // follows it (later only).
            decision.effects.append(.moveSubscriptionEnd(originalTransactionId: purchase.originalTransactionId, expiresAtMs: expires))
        }
        if let replaced = facts.replacedOriginal, replaced != purchase.originalTransactionId {
            decision.effects.append(
                .endSubscription(originalTransactionId: replaced, replacement: purchase.originalTransactionId, atMs: purchase.purchaseDateMs))
        }
    }

    /// Google refunded some units of a multi-quantity purchase (what it still counts as refundable is `purchase.quantity`):
    /// the transaction keeps its grant's coins for those units only. State-based: any number of refunds, pushes and
    /// deliveries end the same, and a later full refund takes back only what is left.
    private static func partialRefund(
        _ purchase: VerifiedPurchase, _ processed: ProcessedTransaction, bought: Int64, rule: GrantRule?, _ stored: Stored,
        _ decision: inout Decision
    ) {
        // The grant paid for the units Google counted as refundable when it was made (all of them, unless it came after a
        // partial refund); granted before that was recorded: all bought.
        let units = stored.grantedUnits ?? bought
        if processed.grantKind == GrantRule.timeLimitedKind {
            // A pass lasts as many of its lengths as units were paid for: the refunded units' go.
            let keep = min(max(purchase.quantity, 1), units)
            guard keep < units else {
                decision.ignoredBecause = "its refunded units were already taken back"
                return
            }
            // A unit's length as the catalog sells it (a pass granted before 2026-11-30 lasted one unit whatever was bought:
            // it keeps what it has, never more than the units left).
            guard case .timeLimited(_, let days)? = rule else {
                decision.ignoredBecause = "a partial refund of a pass the catalog no longer sells as one"
                return
            }
            decision.effects.append(
                .shortenPass(transactionId: purchase.transactionId, keepUnits: keep, ofUnits: units, unitMs: Int64(days) * 86_400_000))
            return
        }
        guard let granted = stored.grantedCoins, granted > 0, units > 0, granted % units == 0 else {
            decision.ignoredBecause = "a partial refund of a purchase that granted no coins here"
            return
        }
        let keep = granted / units * min(max(purchase.quantity, 0), units)
        guard processed.coinsGranted > keep else {
            decision.ignoredBecause = "its refunded units were already taken back"
            return
        }
        decision.effects.append(.takeBackRefundedUnits(transactionId: purchase.transactionId, keepCoins: keep))
    }

    /// The purchase granted to its original's owner, else to the account of its appAccountToken; nil when neither is
    /// known or its environment is refused.
    private static func grant(_ purchase: VerifiedPurchase, _ facts: Facts, _ stored: Stored) -> Effect? {
        guard let scope = facts.scope else { return nil }
        if let owner = stored.owner {
            return .grant(purchase, accountId: owner.accountId, scope: scope, rule: facts.rule, appAccountToken: nil)
        }
        guard let accountId = facts.tokenAccountId else { return nil }
        return .grant(purchase, accountId: accountId, scope: scope, rule: facts.rule, appAccountToken: purchase.appAccountToken)
    }
}
