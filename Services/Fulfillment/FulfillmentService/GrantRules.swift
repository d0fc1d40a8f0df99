import IAPProtocol

/// What the grant rules need from storage inside ONE write transaction: look things up and record them,
/// nothing more. `FulfillmentStore` implements it over a GRDB `Database` (SQLite); a PostgreSQL store
/// implements the same over one transaction; tests use an in-memory one. Every method runs inside the
/// caller's transaction, so the rules' reads and writes commit or roll back together.
public protocol FulfillmentTransaction {
    /// What is stored about a purchase before the rules decide: its original's owner, its own processed row and an early
    /// revocation (`FulfillmentRecords` reads them in one statement, with the account's wallets).
    func stored(_ purchase: VerifiedPurchase, accountId: String) throws -> StoredPurchase
    /// The holder an original transaction is bound to, if any (one per original, whatever environment).
    func owner(original: String) throws -> Holder?
    func bind(_ purchase: VerifiedPurchase, to holder: Holder, nowMs: Int64) throws
    /// Moves an original (its ownership and entitlement) to another account and records the move.
    func transfer(_ purchase: VerifiedPurchase, from accountId: String, to holder: Holder, nowMs: Int64) throws

    /// The processed transaction with this id (one per id, whatever environment).
    func processed(_ transactionId: String) throws -> ProcessedTransaction?
    func recordProcessed(_ purchase: VerifiedPurchase, holder: Holder, grantKind: String, coins: Int64, nowMs: Int64) throws
    /// Claims a transaction id for the first decision about it here (its grant, or a refund that came before it): every
    /// first decision writes the same key, so of two made at once from the same unseen state (a redeem and a refund
    /// notification, in transactions that read different rows) the second fails and runs again on the first's records.
    /// Not called when the rules' read saw a claim (`StoredPurchase.claimed`; an early revocation holds one).
    func claim(_ transactionId: String) throws
    func markRevoked(_ transactionId: String, reason: String, nowMs: Int64) throws
    /// What the transaction's revocation would take back now (after part of it was refunded).
    func setCoinsGranted(_ transactionId: String, coins: Int64) throws
    /// The units of a Google Play purchase its grant now stands for (what a partial refund of a pass left).
    func setGrantedUnits(_ transactionId: String, units: Int64) throws
    /// Clears a revocation (a refund Apple reversed).
    func markReinstated(_ transactionId: String) throws
    /// Keeps when Apple signed that the transaction stands (a refund's reversal, its current copy), forward only, whether
    /// or not it was redeemed here (`StoredPurchase.standsSignedMs`).
    func recordStandsSigned(_ transactionId: String, signedMs: Int64) throws
    func standsSignedMs(_ transactionId: String) throws -> Int64?
    /// Keeps when Apple signed that the transaction is refunded (a copy that said so, applied here), forward only: a
    /// reversal Apple signed before it does not give the purchase back.
    func recordRefundSigned(_ transactionId: String, signedMs: Int64) throws
    /// The reason of a refund or revocation Apple announced before this transaction was ever redeemed here.
    func earlyRevocation(_ transactionId: String) throws -> String?
    /// The share (milliunits) of an Apple prorated refund remembered as an early revocation; nil for a whole one or none.
    func earlyRefundShare(_ transactionId: String) throws -> Int64?
    /// An early revocation no longer needed: its redeem recorded the purchase revoked, or Apple reversed the refund before
    /// any redeem (then the transaction id's claim goes with it: nothing is decided about it here any more).
    func forgetEarlyRevocation(_ transactionId: String) throws
    /// The debt this transaction's reversals added since its last reinstatement (a prorated refund's and a later whole
    /// one's), 0 for none.
    func reversalDebtSinceReinstatement(_ transactionId: String) throws -> Int64
    /// The coins the transaction's grant row gave (before any partial refund), if it has one.
    func grantedCoins(_ transactionId: String) throws -> Int64?
    /// Whether a later period of `original` than the recorded `transactionId` (ending at `endsAtMs`) is recorded here and
    /// not revoked (`revoked`: and revoked). Later is bought later (Apple: an upgrade to a shorter plan ends before the
    /// period it replaced, and is later), or bought at the same moment and ending later (Google Play: a token's orders
    /// share its start time). A period bought later ending at `endsAtMs` too is a restored copy of this one, not a later
    /// period, unless `revoked` (a revoked copy holds a reversal back, as any period as late). With `revoked`, a period an
    /// administrator revoked counts whenever it was bought: their revocation of any period ends the access for good.
    func laterPeriodHeld(environment: String, original: String, than transactionId: String, endsAtMs: Int64, revoked: Bool) throws -> Bool
    /// Whether a transaction of `original` other than `transactionId`, recorded and not revoked, was bought after `afterMs`.
    func laterPurchaseHeld(environment: String, original: String, afterMs: Int64, other transactionId: String) throws -> Bool

    func entitlement(original: String) throws -> EntitlementRecord?
    func insertEntitlement(_ record: EntitlementRecord) throws
    /// Replaces the start, expiry and revocation of the entitlement of `record.originalTransactionId`.
    func updateEntitlement(_ record: EntitlementRecord) throws
    /// The holder's entitlements that are not revoked and have not ended by `activeAtMs` (nil: all not revoked).
    func entitlements(_ holder: Holder, activeAtMs: Int64?) throws -> [EntitlementRecord]

    func wallet(_ holder: Holder) throws -> Wallet
    /// Appends the row and sets the holder's wallet to the row's `balance` and `owed`.
    func append(_ row: LedgerRow) throws
    func spend(_ holder: Holder, idempotencyKey: String) throws -> RecordedSpend?
    /// Owes `payload` to an outside party (`OutboxKind`), durably with this transaction's change; owing the same
    /// (kind, key) again replaces the payload and starts the attempts over.
    func enqueueOutbox(kind: OutboxKind, key: String, payload: String, nowMs: Int64) throws
    /// Appends `event` to the feed (`EventRecords.append`): its sequence, balance and owed are read at the insert.
    func appendEvent(_ event: FulfillmentEvent) throws
    /// Keeps the package of a Google Play subscription's purchase token (the first one kept stays).
    func rememberPlayPackage(purchaseToken: String, packageName: String) throws
}

/// What the fulfillment service needs from storage: each write runs `GrantRules` inside one transaction
/// of the engine (`FulfillmentStore` on SQLite; a PostgreSQL store implements the same over its own
/// `FulfillmentTransaction`), and the reads answer from committed data.
public protocol FulfillmentStorage: NotificationInboxStorage, OutboxStorage, EventStorage, CustomerStorage, RetentionStorage {
    /// `owed`: what the grant owes Apple afterwards (`AppleFollowUps`), recorded in the outbox in the same transaction.
    func apply(
        _ planned: [PlannedPurchase], accountId: String, appAccountToken: String?, owed: AppleFollowUps, mode: FulfillmentMode,
        policy: OwnershipPolicy, answerScope: AccountScope, nowMs: Int64
    ) async throws -> AppliedPurchases
    func revoke(transactionId: String, reason: String, nowMs: Int64) async throws -> RevokeOutcome
    /// Reverses a refund (`GrantRules.reinstate`); false when the transaction is unknown, or neither revoked nor partly
    /// taken back by a prorated refund.
    func reinstate(transactionId: String, nowMs: Int64) async throws -> Bool
    /// Remembers a refund or revocation of a purchase not redeemed here yet: its redeem records it refunded (only the share
    /// `refundShareMilli` of a coin grant, for Apple's prorated refund; a whole refund remembered as well wins).
    func recordEarlyRevocation(transactionId: String, reason: String, refundShareMilli: Int64?, nowMs: Int64) async throws
    /// Keeps a subscription's renewal state, forward only by `signedDateMs`; false when an newer one is kept.
    func recordRenewal(_ state: RenewalState, nowMs: Int64) async throws -> Bool
    /// Applies one notification in ONE transaction with its inbox row's outcome (`NotificationRules`); a grant it makes
    /// owes Apple what `owed` says (Finish Transaction; never ties: the notification's token is the account's own).
    func applyNotification(_ facts: NotificationRules.Facts, uuid: String, attempts: Int, owed: AppleFollowUps, nowMs: Int64) async throws
        -> NotificationRules.Decision
    /// The processed transaction with this id, committed.
    func processed(transactionId: String) async throws -> ProcessedTransaction?
    /// Where the last reconciliation's Notification History read ended, per environment.
    func reconcileCheckpoint(environment: String) async throws -> Int64?
    func saveReconcileCheckpoint(environment: String, signedDateMs: Int64) async throws
    /// Originals of subscriptions to ask Apple about, with their ends: ended without news in the last 60 days, or in
    /// billing retry; those after `after` in the order (end, original), the earliest first.
    func subscriptionsToCheck(nowMs: Int64, limit: Int, after: (expiresAtMs: Int64, original: String)) async throws
        -> [(original: String, expiresAtMs: Int64)]
    /// Google Play subscriptions to ask Google about (`FulfillmentQueries.playSubscriptionsToCheck`).
    func playSubscriptionsToCheck(nowMs: Int64, limit: Int) async throws -> [PlaySubscriptionToCheck]
    /// Moves a subscription's end later (`GrantRules.extendRenewal`); false when there is nothing to move.
    func extendEntitlement(originalTransactionId: String, expiresAtMs: Int64, nowMs: Int64) async throws -> Bool
    func spend(
        accountId: String, scope: AccountScope, amount: Int64, idempotencyKey: String, memo: String?,
        nowMs: Int64
    ) async throws -> SpendOutcome
    /// Appends to the administrators' audit log (append-only).
    func recordAudit(
        action: String, accountId: String?, transactionId: String?, reason: String, credential: String, operatorName: String?, nowMs: Int64
    ) async throws
    /// The audit log, newest first.
    func audit(limit: Int) async throws -> [AuditEntry]
    /// The audit log's entries of one action about one transaction (or request) id, newest first.
    func audit(action: String, transactionId: String, limit: Int) async throws -> [AuditEntry]
    /// True for a notification applied by a version of this service older than the inbox.
    func notificationWasApplied(_ uuid: String) async throws -> Bool
    func owner(originalTransactionId: String) async throws -> Holder?
    /// The account's subscriptions in a scope, active or not, with the periods paid for each (offer eligibility).
    func subscriptionHistory(accountId: String, scope: AccountScope, nowMs: Int64) async throws -> [SubscriptionHistoryRecord]
    /// A Production transaction the account holds (its oldest entitlement's original, else its first coin grant's),
    /// naming its Apple customer: offer eligibility reads that customer's history at Apple. Nil when it holds none.
    func customerTransactionId(accountId: String) async throws -> String?
    func balance(accountId: String, scope: AccountScope) async throws -> Wallet
    func entitlements(accountId: String, scope: AccountScope, nowMs: Int64) async throws
        -> (entitlements: [Entitlement], balance: Int64, owed: Int64)
    func ledger(accountId: String, scope: AccountScope, after: Int64, limit: Int) async throws -> (entries: [LedgerEntry], next: Int64?)
    /// The entitlement an original transaction granted (a pass's period as stacked here), if any.
    func entitlement(originalTransactionId: String) async throws -> EntitlementRecord?
    /// Records that the account was given a download of the content (its first time only).
    func recordContentDelivery(accountId: String, scope: AccountScope, contentId: String, nowMs: Int64) async throws
    /// The content ids the account was ever given a download of.
    func deliveredContent(accountId: String, scope: AccountScope) async throws -> Set<String>
    /// Closes the storage after the server has drained.
    func close() throws
}

extension FulfillmentStorage {
    /// `apply` owing Apple nothing.
    public func apply(
        _ planned: [PlannedPurchase], accountId: String, appAccountToken: String?, mode: FulfillmentMode,
        policy: OwnershipPolicy, answerScope: AccountScope = .production, nowMs: Int64
    ) async throws -> AppliedPurchases {
        try await apply(
            planned, accountId: accountId, appAccountToken: appAccountToken, owed: [], mode: mode, policy: policy,
            answerScope: answerScope, nowMs: nowMs)
    }
}

/// What a grant owes Apple after it commits, written to the outbox in the grant's transaction and delivered after it.
public struct AppleFollowUps: OptionSet, Sendable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// Set App Account Token for each granted purchase that carries none (`GrantRules.ties`).
    public static let ties = AppleFollowUps(rawValue: 1)
    /// Finish Transaction for each transaction recorded here, once its content is delivered: the device stops
    /// delivering it again even when the app died before its own `finish()`.
    public static let finishes = AppleFollowUps(rawValue: 2)
    /// And Google's: acknowledge (consume, for coins) each Google Play purchase granted or already granted to the account
    /// that Google does not yet have as acknowledged (`GrantRules.playAcknowledgements`).
    public static let playAcknowledgements = AppleFollowUps(rawValue: 4)
}

/// Checks of what the schema and the rules keep true, for tests, benchmarks and the crash harness (both engines).
public protocol FulfillmentInvariants: Sendable {
    /// Accounts whose wallet differs from their ledger, in any scope: `balance` must be the sum of the deltas and
    /// `owed` the sum of debts less the sum of recoveries.
    func ledgerMismatches() async throws -> [String]
    /// Transactions whose refunds and reversals did not alternate: what a notification applied twice would leave.
    func duplicateLedgerEffects() async throws -> [String]
    /// Transaction ids whose claim (`FulfillmentTransaction.claim`) disagrees with their records: a purchase recorded, or a
    /// refund remembered before its redeem, without a claim (a decision a concurrent one would not meet), or a claim with
    /// neither behind it (left only by an instance older than the claim, reversing an early refund).
    func claimMismatches() async throws -> [String]
}

/// The purchase-lifecycle rules of docs/receipts.md and docs/security.md, as plain Swift over a
/// `FulfillmentTransaction`: who owns a purchase, what it grants, what a refund takes back, what is owed.
public enum GrantRules {
    /// The reasons a store's refund or revocation is recorded with; any other is an administrator's (`revokeTransaction`
    /// refuses these two as its reason).
    public static let storeRevocationReasons: Set<String> = ["refunded", "revoked"]
    /// The ledger memo's start for an administrator's revocation, whatever its reason.
    static let administratorRevocationMemo = "revoked by support"

    /// Records and grants every purchase; answers what was done and the `answerScope`'s state.
    /// `appAccountToken` is the account's own: a StoreKit 2 purchase made with another belongs to another account.
    /// `owed`: see `AppleFollowUps`.
    public static func apply(
        _ planned: [PlannedPurchase], accountId: String, appAccountToken: String?, owed: AppleFollowUps = [], mode: FulfillmentMode,
        policy: OwnershipPolicy, answerScope: AccountScope, nowMs: Int64,
        in tx: some FulfillmentTransaction
    ) throws -> AppliedPurchases {
        var answered: [(Int, TransactionResult)] = []
        var transfers: [(String, String)] = []
        var recorded: [String] = []  // Production transactions recorded here by this call: each finished at Apple once
        // Refunded subscription periods go last: a later period paid for, recorded first, keeps its access when the
        // refund of an earlier one is taken back (`pastPeriod`). The answers keep the request's order.
        let refundedPeriod = { (i: Int) -> Bool in
            if case .subscription = planned[i].rule, planned[i].purchase.cancellationDateMs != nil { return true }
            return false
        }
        for index in planned.indices.filter({ !refundedPeriod($0) }) + planned.indices.filter(refundedPeriod) {
            let item = planned[index]
            var p = item.purchase
            func result(_ outcome: RedeemOutcome, finishable: Bool = true) {
                answered.append(
                    (
                        index,
                        TransactionResult(
                            transactionId: p.transactionId, originalTransactionId: p.originalTransactionId,
                            productId: p.productId, outcome: outcome, finishable: finishable)
                    ))
            }
            guard let rule = item.rule else {
                result(.unknownProduct, finishable: false)  // kept unfinished: retried after a catalog update
                continue
            }
            if let token = p.appAccountToken, let own = appAccountToken?.lowercased(), token != own {
                result(.ownedByAnotherAccount)  // the app bound this purchase to another account when it was made
                continue
            }
            // Read once: the writes below (ownership, entitlements, events) change none of the three.
            let stored = try tx.stored(p, accountId: accountId)
            if p.revocationSignedBefore(standsSignedMs: stored.standsSignedMs) {
                // A copy signed while a refund held that Apple reversed since: the refund no longer holds (until 2026-11-30
                // such a copy took the refunded share, or the whole purchase, a second time).
                p.cancellationDateMs = nil
                p.proratedRefundMilli = nil
            }
            // Apple's signed word that it is refunded (Xcode-signed copies are anyone's word): a reversal signed before it
            // no longer gives the purchase back. Kept only for a copy of this purchase in its own scope (below, any
            // other is refused before anything is written).
            let refundSigned = p.cancellationDateMs != nil && p.environment != "Xcode" ? p.signedDateMs : nil
            let owner = stored.owner
            // A purchase's scope is its own verified environment's: one naming an original bound in another scope
            // (an Xcode-signed renewal of a Production purchase) is refused.
            if let owner, owner.scope != item.scope {
                result(.wrongEnvironment, finishable: false)
                continue
            }
            // An original's transactions all land in the scope it was first bound to.
            let holder = Holder(accountId: accountId, scope: owner?.scope ?? item.scope)
            if let owner, owner.accountId != accountId {
                // A Google Play purchase the app bound to no account is never moved: anyone who saw its token could take it.
                // Nor is a refunded one (a refund in the purchase, or remembered before it was redeemed).
                guard policy == .transfer, rule.entitlement != nil, p.cancellationDateMs == nil, !p.isUpgraded, stored.earlyRevocation == nil,
                    p.play == nil || p.appAccountToken != nil
                else {
                    result(.ownedByAnotherAccount)
                    continue
                }
                try tx.transfer(p, from: owner.accountId, to: holder, nowMs: nowMs)
                transfers.append((p.originalTransactionId, owner.accountId))
                if let moved = try tx.entitlement(original: p.originalTransactionId) {
                    try tx.event(.purchaseRestored, about: moved, nowMs: nowMs) { $0.otherAccountId = owner.accountId }
                    try tx.event(.purchaseTransferred, about: moved, holder: owner, nowMs: nowMs) {
                        $0.otherAccountId = accountId
                        $0.entitlementEndsAtMs = nowMs
                    }
                }
                if stored.processed == nil {
                    if !stored.claimed { try tx.claim(p.transactionId) }
                    try tx.recordProcessed(p, holder: holder, grantKind: rule.kind, coins: 0, nowMs: nowMs)
                    if p.finishableAtApple { recorded.append(p.transactionId) }
                    // A renewal not seen here before moves the end with the subscription: recorded now, it would be
                    // `alreadyGranted` to its notification, and the period it paid for lost.
                    if case .subscription(let name) = rule { _ = try extendSubscription(p, entitlement: name, nowMs: nowMs, in: tx) }
                }
                result(.restored)
                continue
            }
            // A purchase is recorded once. The record must be this purchase's: a payload naming another purchase's
            // transaction id under another original (an Xcode receipt anyone can sign) neither revokes nor restores it.
            if let processed = stored.processed {
                if processed.originalTransactionId != p.originalTransactionId {
                    result(.rejected, finishable: false)
                } else if processed.revokedAtMs != nil {
                    result(.revoked)
                } else if p.proratedRefundMilli != nil, case .coins = rule {
                    if let refundSigned { try tx.recordRefundSigned(p.transactionId, signedMs: refundSigned) }
                    // A share of a coin purchase refunded (its notification lost, or not here yet): that share of the whole
                    // grant is taken back, once (state-based, as the notification's), and the rest stays granted.
                    if let granted = try tx.grantedCoins(p.transactionId), let keep = p.coinsKept(ofGrant: granted), processed.coinsGranted > keep {
                        _ = try takeBackRefundedUnits(p.transactionId, keepCoins: keep, nowMs: nowMs, in: tx)
                    }
                    result(.alreadyGranted)
                } else if p.cancellationDateMs != nil {
                    if let refundSigned { try tx.recordRefundSigned(p.transactionId, signedMs: refundSigned) }
                    _ = try revoke(p.transactionId, reason: "refunded", nowMs: nowMs, in: tx)
                    result(.revoked)
                } else {
                    result(.alreadyGranted)
                }
                continue
            }
            if case .coins = rule, mode == .restore {
                continue  // restore never grants consumables; an unredeemed one is left for redeem
            }
            if owner == nil { try tx.bind(p, to: holder, nowMs: nowMs) }
            // Refunded before we ever saw it (the payload says so, or Apple's notification came first).
            let early = stored.earlyRevocation
            if !stored.claimed { try tx.claim(p.transactionId) }
            if p.cancellationDateMs != nil || early != nil {
                if let refundSigned { try tx.recordRefundSigned(p.transactionId, signedMs: refundSigned) }
                // Granted and taken back at once, as a redeem followed by its refund: what it is worth is on record, so a
                // reversal of the refund gives it back whole (`reinstate`). A renewal of a subscription held here is only
                // recorded: its period would move (or give back) access that a refund ended. A refunded renewal or
                // re-purchase revokes the entitlement its original granted. The early revocation is spent: removing it
                // also meets a reversal committed meanwhile (which removes it too), so one of the two runs again.
                if case .subscription = rule, owner != nil {
                    try tx.recordProcessed(p, holder: holder, grantKind: rule.kind, coins: 0, nowMs: nowMs)
                } else {
                    _ = try grant(p, rule: rule, holder: holder, firstOfOriginal: owner == nil, nowMs: nowMs, in: tx)
                }
                if p.finishableAtApple { recorded.append(p.transactionId) }
                // A share refunded before the first redeem (REFUND_PRORATED): as this signed copy says, whether or not its
                // notification came first and was remembered, else (a copy signed before the refund) as the remembered one says.
                let share = p.cancellationDateMs != nil ? p.proratedRefundMilli : try early.flatMap { _ in try tx.earlyRefundShare(p.transactionId) }
                if case .coins = rule, let granted = try tx.processed(p.transactionId)?.coinsGranted,
                    let keep = VerifiedPurchase.coinsKept(ofGrant: granted, share: share)
                {
                    // The rest is granted.
                    _ = try takeBackRefundedUnits(p.transactionId, keepCoins: keep, nowMs: nowMs, in: tx)
                    if early != nil { try tx.forgetEarlyRevocation(p.transactionId) }
                    result(.granted)
                    continue
                }
                _ = try revoke(p.transactionId, reason: early ?? "refunded", nowMs: nowMs, in: tx)
                if early != nil { try tx.forgetEarlyRevocation(p.transactionId) }
                result(.revoked)
                continue
            }
            result(try grant(p, rule: rule, holder: holder, firstOfOriginal: owner == nil, nowMs: nowMs, in: tx))
            if p.finishableAtApple { recorded.append(p.transactionId) }
            if owner == nil, case .subscription = rule, let replaced = p.play?.linkedPurchaseToken, replaced != p.originalTransactionId {
                // Google's upgrade or downgrade, redeemed: the plan it replaced ends as when its push arrives (once, whichever is first).
                _ = try endSubscription(original: replaced, replacement: p.originalTransactionId, atMs: p.purchaseDateMs, nowMs: nowMs, in: tx)
            }
        }
        let results = answered.sorted { $0.0 < $1.0 }.map(\.1)
        var owesApple = false
        if owed.contains(.ties), let appAccountToken {
            for item in ties(planned.map(\.purchase), results: results, appAccountToken: appAccountToken) {
                try tx.enqueueOutbox(kind: .appAccountToken, key: item.originalTransactionId, payload: item.appAccountToken, nowMs: nowMs)
                owesApple = true
            }
        }
        if owed.contains(.playAcknowledgements) {
            for (token, owed) in playAcknowledgements(planned, results: results) {
                try tx.enqueueOutbox(kind: .playAcknowledge, key: token, payload: owed, nowMs: nowMs)
                owesApple = true
            }
        }
        for (token, package) in playSubscriptionPackages(planned, results: results) {
            try tx.rememberPlayPackage(purchaseToken: token, packageName: package)
        }
        if owed.contains(.finishes) {
            for transactionId in recorded {
                try tx.enqueueOutbox(kind: .finishTransaction, key: transactionId, payload: "", nowMs: nowMs)
                owesApple = true
            }
        }
        let answer = Holder(accountId: accountId, scope: answerScope)
        let wallet = try tx.wallet(answer)
        return AppliedPurchases(
            results: results, balance: wallet.balance, owed: wallet.owed,
            entitlements: activeEntitlements(try tx.entitlements(answer, activeAtMs: nowMs)), transfers: transfers, owesApple: owesApple)
    }

    /// The purchases to tie to the account at Apple (Set App Account Token) after a redeem: those granted or
    /// restored here that carry no appAccountToken (receipts never do; purchases made outside the app neither),
    /// one per original transaction, so that Apple's later notifications about them name the account. Never an Xcode
    /// purchase: Apple has none, and one signed by a developer can name a real purchase's ids, whose token it must not set.
    static func ties(_ purchases: [VerifiedPurchase], results: [TransactionResult], appAccountToken: String) -> [PendingAccountToken] {
        let granted = Set(results.filter { [.granted, .restored].contains($0.outcome) }.map(\.transactionId))
        var items: [PendingAccountToken] = []
        for p in purchases where p.play == nil && p.environment != "Xcode" && p.appAccountToken == nil && granted.contains(p.transactionId) {
            if !items.contains(where: { $0.originalTransactionId == p.originalTransactionId }) {
                items.append(PendingAccountToken(originalTransactionId: p.originalTransactionId, appAccountToken: appAccountToken.lowercased()))
            }
        }
        return items
    }

    /// Grants a new, unrefunded transaction. `firstOfOriginal`: nothing of its original was bound before.
    static func grant(
        _ p: VerifiedPurchase, rule: GrantRule, holder: Holder, firstOfOriginal: Bool, nowMs: Int64,
        in tx: some FulfillmentTransaction
    ) throws -> RedeemOutcome {
        switch rule {
        case .coins(let perUnit):
            let (coins, overflow) = perUnit.multipliedReportingOverflow(by: p.quantity)
            guard !overflow, coins > 0, coins <= CoinLimits.maxGrant else { throw LedgerLimit.grantTooLarge }
            try tx.recordProcessed(p, holder: holder, grantKind: rule.kind, coins: coins, nowMs: nowMs)
            let after = try append(
                holder, delta: coins, kind: .grant, environment: p.environment, transactionId: p.transactionId,
                memo: p.productId, nowMs: nowMs, in: tx)
            try tx.event(.purchaseGranted, holder, environment: p.environment, nowMs: nowMs) { $0.about(p, delta: coins) }
            // Owed coins (refunds of spent coins) are repaid first, in their own row.
            if after.owed > 0 {
                let repaid = min(after.owed, after.balance)
                try append(
                    holder, delta: -repaid, kind: .recovery, environment: p.environment, transactionId: p.transactionId,
                    memo: "repays refunded coins", recovered: repaid, nowMs: nowMs, in: tx)
                try tx.event(.debtRecovered, holder, environment: p.environment, nowMs: nowMs) {
                    $0.about(p, delta: -repaid)
                    $0.recovered = repaid
                }
            }
            return .granted
        case .permanent(let name):
            try tx.recordProcessed(p, holder: holder, grantKind: rule.kind, coins: 0, nowMs: nowMs)
            guard firstOfOriginal else { return .restored }  // a restore or a free re-purchase of what the account owns
            try insert(entitlement(p, holder, name, startsAtMs: p.purchaseDateMs, expiresAtMs: nil), .purchaseGranted, p, nowMs: nowMs, in: tx)
            return .granted
        case .subscription(let name):
            try tx.recordProcessed(p, holder: holder, grantKind: rule.kind, coins: 0, nowMs: nowMs)
            guard firstOfOriginal else {
                // A renewal ends later: granted.
                return try extendSubscription(p, entitlement: name, nowMs: nowMs, in: tx) ? .granted : .restored
            }
            let record = entitlement(p, holder, name, startsAtMs: p.purchaseDateMs, expiresAtMs: p.expiresDateMs)
            try insert(record, .subscriptionStarted, p, nowMs: nowMs, in: tx)
            return .granted
        case .timeLimited(let name, let days):
            try tx.recordProcessed(p, holder: holder, grantKind: rule.kind, coins: 0, nowMs: nowMs)
            guard firstOfOriginal else { return .restored }
            // Back-to-back passes stack: this one starts at the later of now and the current end.
            let currentEnd = try tx.entitlements(holder, activeAtMs: nil).filter { $0.entitlement == name }.compactMap(\.expiresAtMs).max() ?? 0
            // As long as the units bought (a multi-quantity purchase; until 2026-11-30 one unit's, the rest paid for nothing).
            let start = max(nowMs, currentEnd)
            let (length, overflow) = (Int64(days) * 86_400_000).multipliedReportingOverflow(by: max(p.quantity, 1))
            guard !overflow, length <= GrantRule.longestPassMs, case (let ends, false) = start.addingReportingOverflow(length) else {
                throw LedgerLimit.grantTooLarge
            }
            let record = entitlement(p, holder, name, startsAtMs: start, expiresAtMs: ends)
            try insert(record, .purchaseGranted, p, nowMs: nowMs, in: tx)
            return .granted
        }
    }

    private static func insert(
        _ record: EntitlementRecord, _ type: FulfillmentEventType, _ p: VerifiedPurchase, nowMs: Int64, in tx: some FulfillmentTransaction
    ) throws {
        try tx.insertEntitlement(record)
        try tx.event(type, about: record, nowMs: nowMs) { $0.transactionId = p.transactionId }
    }

    private static func entitlement(
        _ p: VerifiedPurchase, _ holder: Holder, _ name: String, startsAtMs: Int64,
        expiresAtMs: Int64?
    ) -> EntitlementRecord {
        EntitlementRecord(
            environment: p.environment, originalTransactionId: p.originalTransactionId, holder: holder, entitlement: name,
            productId: p.productId, startsAtMs: startsAtMs, expiresAtMs: expiresAtMs)
    }

    /// Revokes one processed transaction, whatever environment it was recorded under: its coins are
    /// reversed (floored at zero, the rest owed) or its entitlement removed, with a reversal ledger row
    /// either way. False if it was already revoked.
    public static func revoke(_ transactionId: String, reason: String, nowMs: Int64, in tx: some FulfillmentTransaction) throws -> Bool {
        guard let record = try tx.processed(transactionId), record.revokedAtMs == nil else { return false }
        try tx.markRevoked(transactionId, reason: reason, nowMs: nowMs)
        // The customer reads the memo (`listLedger`): an administrator's reason, perhaps an internal note, stays in the audit
        // log, the record and the event (before 2026-11-30 it was the memo).
        let memo = "\(storeRevocationReasons.contains(reason) ? reason : administratorRevocationMemo): \(record.productId)"
        let type: FulfillmentEventType = reason == "refunded" ? .purchaseRefunded : .purchaseRevoked
        if record.coinsGranted > 0 {
            // Whatever was spent of it is owed, never dropped: later grants repay it first.
            let taken = min(try tx.wallet(record.holder).balance, record.coinsGranted)
            try append(
                record.holder, delta: -taken, kind: .reversal, environment: record.environment, transactionId: transactionId,
                memo: memo, debt: record.coinsGranted - taken, nowMs: nowMs, in: tx)
            try tx.event(type, record.holder, environment: record.environment, nowMs: nowMs) {
                $0.about(record, transactionId, delta: -taken)
                $0.debt = record.coinsGranted > taken ? record.coinsGranted - taken : nil
                $0.reason = reason
            }
            return true
        }
        if var entitlement = try tx.entitlement(original: record.originalTransactionId), entitlement.revokedAtMs == nil,
            try !(storeRevocationReasons.contains(reason) && pastPeriod(record, transactionId, in: tx))
        {
            entitlement.revokedAtMs = nowMs
            try tx.updateEntitlement(entitlement)
            try tx.event(type, about: entitlement, holder: record.holder, nowMs: nowMs) {
                $0.transactionId = transactionId
                $0.reason = reason
            }
            if record.grantKind == GrantRule.timeLimitedKind {
                try restack(entitlement.holder, entitlement: entitlement.entitlement, nowMs: nowMs, in: tx)
            }
        }
        try append(
            record.holder, delta: 0, kind: .reversal, environment: record.environment, transactionId: transactionId, memo: memo,
            nowMs: nowMs, in: tx)
        return true
    }

    /// After a stacked pass is revoked, the passes queued behind it move up: each one not yet started
    /// starts at the later of now and the end of the one before it, keeping its own length.
    static func restack(_ holder: Holder, entitlement name: String, nowMs: Int64, in tx: some FulfillmentTransaction) throws {
        let passes = try tx.entitlements(holder, activeAtMs: nil).filter { $0.entitlement == name && $0.expiresAtMs != nil }
            .sorted { $0.startsAtMs < $1.startsAtMs }
        var cursor = nowMs
        for var pass in passes {
            let start = pass.startsAtMs, length = pass.expiresAtMs! - pass.startsAtMs
            guard start > nowMs else {
                cursor = max(cursor, pass.expiresAtMs!)  // running or over: stays as it is
                continue
            }
            let newStart = min(start, max(nowMs, cursor))  // passes only ever move earlier
            if newStart < start {
                pass.startsAtMs = newStart
                pass.expiresAtMs = newStart + length
                try tx.updateEntitlement(pass)
                try tx.event(.purchaseRescheduled, about: pass, nowMs: nowMs)
            }
            cursor = newStart + length
        }
    }

    /// Spends once per (holder, idempotency key): the same key with the same amount and memo answers the
    /// first result, with other params it is a conflict; never while anything is owed, never below zero.
    public static func spend(
        _ holder: Holder, amount: Int64, idempotencyKey: String, memo: String?, nowMs: Int64,
        in tx: some FulfillmentTransaction
    ) throws -> SpendOutcome {
        if let earlier = try tx.spend(holder, idempotencyKey: idempotencyKey) {
            return earlier.delta == -amount && earlier.memo == memo ? .replayed(balance: earlier.balance) : .keyConflict
        }
        let wallet = try tx.wallet(holder)
        guard wallet.owed == 0 else { return .owes(owed: wallet.owed, balance: wallet.balance) }
        guard wallet.balance >= amount else { return .insufficient(balance: wallet.balance) }
        let after = try append(holder, delta: -amount, kind: .spend, idempotencyKey: idempotencyKey, memo: memo, nowMs: nowMs, in: tx)
        try tx.event(.coinsSpent, holder, environment: nil, nowMs: nowMs) {
            $0.delta = -amount
            $0.reason = memo
        }
        return .spent(balance: after.balance)
    }

    /// Appends a ledger row with checked arithmetic; answers the holder's wallet after it.
    @discardableResult
    static func append(
        _ holder: Holder, delta: Int64, kind: LedgerKind, environment: String? = nil, transactionId: String? = nil,
        idempotencyKey: String? = nil, memo: String?, debt: Int64 = 0, recovered: Int64 = 0, nowMs: Int64,
        in tx: some FulfillmentTransaction
    ) throws -> Wallet {
        let before = try tx.wallet(holder)
        let (balance, balanceOverflow) = before.balance.addingReportingOverflow(delta)
        let (withDebt, debtOverflow) = before.owed.addingReportingOverflow(debt)
        let owed = withDebt - recovered
        guard !balanceOverflow, !debtOverflow, balance >= 0, balance <= CoinLimits.maxBalance, owed >= 0 else {
            throw LedgerLimit.balanceOutOfRange
        }
        try tx.append(
            LedgerRow(
                holder: holder, delta: delta, balance: balance, owed: owed, kind: kind, environment: environment,
                transactionId: transactionId, idempotencyKey: idempotencyKey, memo: memo, debt: debt, recovered: recovered,
                createdAtMs: nowMs))
        return Wallet(balance: balance, owed: owed)
    }

    /// What an account has now, one per entitlement name: a permanent one wins, else the latest end.
    public static func activeEntitlements(_ records: [EntitlementRecord]) -> [Entitlement] {
        let ordered = records.sorted {
            ($0.entitlement, $0.expiresAtMs == nil ? 0 : 1, -($0.expiresAtMs ?? 0), $0.originalTransactionId)
                < ($1.entitlement, $1.expiresAtMs == nil ? 0 : 1, -($1.expiresAtMs ?? 0), $1.originalTransactionId)
        }
        var seen = Set<String>()
        return ordered.compactMap { r in
            guard seen.insert(r.entitlement).inserted else { return nil }
            return Entitlement(
                entitlement: r.entitlement, productId: r.productId, expiresAtMs: r.expiresAtMs,
                originalTransactionId: r.originalTransactionId)
        }
    }
}
