import Foundation
import IAPProtocol

/// What a store's refund takes back in part, and what a reversal of a refund gives back.
extension GrantRules {
    /// A refund Apple reversed (REFUND_REVERSED): the transaction counts again. Coins come back in their own
    /// `reinstatement` row: the debt the refund left that is still owed is forgiven, and the rest of the grant
    /// is paid back (so the account ends as if the refund never happened); an entitlement the refund removed
    /// is given back. A coin purchase a prorated refund took a share of (`takeBackRefundedUnits`) gets that share back
    /// the same way. False if the transaction is unknown or neither revoked nor partly taken back, or revoked by an
    /// administrator: a store's later word (Apple's current state, a reversal of a refund that never was) does not undo a
    /// revocation for fraud.
    public static func reinstate(_ transactionId: String, nowMs: Int64, in tx: some FulfillmentTransaction) throws -> Bool {
        guard let record = try tx.processed(transactionId) else {
            // Reversed before it was ever redeemed: its early refund no longer holds.
            guard try tx.earlyRevocation(transactionId) != nil else { return false }
            try tx.forgetEarlyRevocation(transactionId)
            return true
        }
        guard record.revokedAtMs != nil else {
            guard let whole = try tx.grantedCoins(transactionId), whole > record.coinsGranted else { return false }
            try tx.setCoinsGranted(transactionId, coins: whole)
            try giveBack(
                record, transactionId, coins: whole - record.coinsGranted, memo: "\(partialRefundReversedReason): \(record.productId)", nowMs: nowMs,
                in: tx)
            return true
        }
        guard !record.revokedByAdministrator else { return false }
        try tx.markReinstated(transactionId)
        let memo = "refund reversed: \(record.productId)"
        if record.coinsGranted > 0 {
            // A prorated refund's share taken before the whole refund comes back too: Apple's reversal leaves nothing refunded.
            let whole = max(try tx.grantedCoins(transactionId) ?? 0, record.coinsGranted)
            if whole > record.coinsGranted { try tx.setCoinsGranted(transactionId, coins: whole) }
            try giveBack(record, transactionId, coins: whole, memo: memo, nowMs: nowMs, in: tx)
            return true
        }
        var given: EntitlementRecord?
        if var entitlement = try tx.entitlement(original: record.originalTransactionId), entitlement.revokedAtMs != nil,
            try !laterRevocationHeld(record, transactionId, in: tx)
        {
            entitlement.revokedAtMs = nil
            try tx.updateEntitlement(entitlement)
            given = entitlement
        }
        try append(
            record.holder, delta: 0, kind: .reinstatement, environment: record.environment, transactionId: transactionId, memo: memo,
            nowMs: nowMs, in: tx)
        if let given {
            try tx.event(.purchaseReinstated, about: given, holder: record.holder, nowMs: nowMs) { $0.transactionId = transactionId }
        } else {
            try tx.event(.purchaseReinstated, record.holder, environment: record.environment, nowMs: nowMs) { $0.about(record, transactionId) }
        }
        return true
    }

    /// Pays `coins` a refund took back to the record's holder in a `reinstatement` row: what the refunds' reversal rows left
    /// owed (since the last reinstatement) and is still owed is forgiven, the rest paid.
    private static func giveBack(
        _ record: ProcessedTransaction, _ transactionId: String, coins: Int64, memo: String, nowMs: Int64, in tx: some FulfillmentTransaction
    ) throws {
        let forgiven = min(try tx.reversalDebtSinceReinstatement(transactionId), try tx.wallet(record.holder).owed, coins)
        try append(
            record.holder, delta: coins - forgiven, kind: .reinstatement, environment: record.environment, transactionId: transactionId,
            memo: memo, recovered: forgiven, nowMs: nowMs, in: tx)
        try tx.event(.purchaseReinstated, record.holder, environment: record.environment, nowMs: nowMs) {
            $0.about(record, transactionId, delta: coins - forgiven)
            $0.recovered = forgiven > 0 ? forgiven : nil
        }
    }

    /// The memo's start of a partial refund's reversal (`duplicateLedgerEffects` tells them and their reinstatements from
    /// whole refunds' by it).
    static let partialRefundReason = "partially refunded"
    /// The memo's start of the reinstatement of a partial refund's share (Apple reversed a prorated refund).
    static let partialRefundReversedReason = "partial refund reversed"

    /// Takes back what a transaction granted beyond `keepCoins` (Google refunded some of its units), as a refund takes back:
    /// what was spent is owed. The transaction stays granted, with `keepCoins` left for a later refund to take. False when
    /// there is nothing (more) to take.
    public static func takeBackRefundedUnits(_ transactionId: String, keepCoins: Int64, nowMs: Int64, in tx: some FulfillmentTransaction) throws
        -> Bool
    {
        guard let record = try tx.processed(transactionId), record.revokedAtMs == nil, keepCoins >= 0, record.coinsGranted > keepCoins else {
            return false
        }
        let amount = record.coinsGranted - keepCoins
        try tx.setCoinsGranted(transactionId, coins: keepCoins)
        let taken = min(try tx.wallet(record.holder).balance, amount)
        try append(
            record.holder, delta: -taken, kind: .reversal, environment: record.environment, transactionId: transactionId,
            memo: "\(partialRefundReason): \(record.productId)", debt: amount - taken, nowMs: nowMs, in: tx)
        try tx.event(.purchaseRefunded, record.holder, environment: record.environment, nowMs: nowMs) {
            $0.about(record, transactionId, delta: -taken)
            $0.debt = amount > taken ? amount - taken : nil
            $0.reason = partialRefundReason
        }
        return true
    }

    /// A pass (time-limited) bought in several units, some of them refunded (Google's quantity-based partial refund): it
    /// now ends at most `keepUnits` units of `unitMs` after its start (a pass granted as one unit whatever was bought,
    /// before 2026-11-30, keeps what it has), the passes queued behind it move up, and the units are kept, so the same
    /// refund again shortens nothing. False when there is nothing (more) to shorten.
    public static func shortenPass(
        _ transactionId: String, keepUnits: Int64, ofUnits: Int64, unitMs: Int64, nowMs: Int64, in tx: some FulfillmentTransaction
    ) throws -> Bool {
        guard let record = try tx.processed(transactionId), record.revokedAtMs == nil, keepUnits > 0, ofUnits > keepUnits, unitMs > 0,
            var pass = try tx.entitlement(original: record.originalTransactionId), pass.revokedAtMs == nil, let ends = pass.expiresAtMs
        else { return false }
        let (kept, overflow) = unitMs.multipliedReportingOverflow(by: keepUnits)
        if !overflow, case (let end, false) = pass.startsAtMs.addingReportingOverflow(kept) { pass.expiresAtMs = min(ends, end) }
        try tx.updateEntitlement(pass)
        try tx.setGrantedUnits(transactionId, units: keepUnits)
        try append(
            record.holder, delta: 0, kind: .reversal, environment: record.environment, transactionId: transactionId,
            memo: "\(partialRefundReason): \(record.productId)", nowMs: nowMs, in: tx)
        try tx.event(.purchaseRefunded, about: pass, holder: record.holder, nowMs: nowMs) {
            $0.transactionId = transactionId
            $0.reason = partialRefundReason
        }
        try restack(pass.holder, entitlement: pass.entitlement, nowMs: nowMs, in: tx)
        return true
    }
}
