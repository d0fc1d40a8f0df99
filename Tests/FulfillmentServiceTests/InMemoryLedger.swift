import FulfillmentService
import IAPProtocol

/// A `FulfillmentTransaction` in memory, for fast tests of `GrantRules` without a database. It keeps the
/// schema's uniqueness rules (one processed row per transaction id, one owner per original, one
/// entitlement per original, one spend per key) as preconditions, so a rule that broke them would trap.
final class InMemoryLedger: FulfillmentTransaction {
    var owners: [String: Holder] = [:]
    var processedRows: [String: ProcessedTransaction] = [:]
    var purchaseDates: [String: Int64] = [:]
    var entitlementRows: [String: EntitlementRecord] = [:]
    var wallets: [Holder: Wallet] = [:]
    var rows: [LedgerRow] = []
    var transfers: [(original: String, from: String, to: String)] = []
    var grantedUnitsByTransaction: [String: Int64] = [:]

    func owner(original: String) -> Holder? { owners[original] }

    func bind(_ p: VerifiedPurchase, to holder: Holder, nowMs: Int64) {
        precondition(owners[p.originalTransactionId] == nil, "one owner per original")
        owners[p.originalTransactionId] = holder
    }

    func transfer(_ p: VerifiedPurchase, from accountId: String, to holder: Holder, nowMs: Int64) {
        owners[p.originalTransactionId] = holder
        entitlementRows[p.originalTransactionId]?.holder = holder
        for (id, row) in processedRows where row.originalTransactionId == p.originalTransactionId { processedRows[id]?.holder = holder }
        transfers.append((p.originalTransactionId, accountId, holder.accountId))
    }

    func processed(_ transactionId: String) -> ProcessedTransaction? { processedRows[transactionId] }

    func recordProcessed(_ p: VerifiedPurchase, holder: Holder, grantKind: String, coins: Int64, nowMs: Int64) {
        precondition(processedRows[p.transactionId] == nil, "one processed row per transaction")
        purchaseDates[p.transactionId] = p.purchaseDateMs
        processedRows[p.transactionId] = ProcessedTransaction(
            environment: p.environment, holder: holder,
            originalTransactionId: p.originalTransactionId, productId: p.productId,
            grantKind: grantKind, coinsGranted: coins, revokedAtMs: nil, expiresDateMs: p.expiresDateMs)
    }

    func laterPeriodHeld(environment: String, original: String, than transactionId: String, endsAtMs: Int64, revoked: Bool) -> Bool {
        guard let bought = purchaseDates[transactionId] else { return false }  // as the SQL's join: no row, nothing later
        return processedRows.contains { id, row in
            guard id != transactionId, row.environment == environment, row.originalTransactionId == original,
                (row.revokedAtMs != nil) == revoked, let ends = row.expiresDateMs, let at = purchaseDates[id]
            else { return false }
            if revoked {
                return at > bought || (at == bought && ends >= endsAtMs)
                    || !GrantRules.storeRevocationReasons.contains(row.revokeReason ?? "refunded")
            }
            return (at > bought && ends != endsAtMs) || (at == bought && ends > endsAtMs)
        }
    }

    func laterPurchaseHeld(environment: String, original: String, afterMs: Int64, other transactionId: String) -> Bool {
        processedRows.contains { id, row in
            id != transactionId && row.environment == environment && row.originalTransactionId == original && row.revokedAtMs == nil
                && (purchaseDates[id] ?? .min) > afterMs
        }
    }

    func markRevoked(_ transactionId: String, reason: String, nowMs: Int64) {
        processedRows[transactionId]?.revokedAtMs = nowMs
        processedRows[transactionId]?.revokeReason = reason
    }

    func markReinstated(_ transactionId: String) {
        processedRows[transactionId]?.revokedAtMs = nil
        processedRows[transactionId]?.revokeReason = nil
    }

    var reversals: [String: Int64] = [:]
    func recordStandsSigned(_ transactionId: String, signedMs: Int64) {
        reversals[transactionId] = max(reversals[transactionId] ?? .min, signedMs)
    }
    func standsSignedMs(_ transactionId: String) -> Int64? { reversals[transactionId] }
    var refunds: [String: Int64] = [:]
    func recordRefundSigned(_ transactionId: String, signedMs: Int64) {
        refunds[transactionId] = max(refunds[transactionId] ?? .min, signedMs)
    }

    func setCoinsGranted(_ transactionId: String, coins: Int64) { processedRows[transactionId]?.coinsGranted = coins }
    func setGrantedUnits(_ transactionId: String, units: Int64) { grantedUnitsByTransaction[transactionId] = units }

    /// Transaction ids the rules claimed (an early revocation holds its own): claimed twice is a rule's mistake, which
    /// PostgreSQL would answer with a conflict on every attempt.
    var claims: Set<String> = []
    func claim(_ transactionId: String) {
        precondition(earlyRevocations[transactionId] == nil && claims.insert(transactionId).inserted, "one claim per transaction")
    }

    var earlyRevocations: [String: String] = [:]
    func earlyRevocation(_ transactionId: String) -> String? { earlyRevocations[transactionId] }
    var earlyRefundShares: [String: Int64] = [:]
    func earlyRefundShare(_ transactionId: String) -> Int64? { earlyRefundShares[transactionId] }
    func forgetEarlyRevocation(_ transactionId: String) {
        earlyRefundShares[transactionId] = nil
        earlyRevocations[transactionId] = nil
        if processedRows[transactionId] == nil { claims.remove(transactionId) }
    }

    func reversalDebtSinceReinstatement(_ transactionId: String) -> Int64 {
        let mine = rows.filter { $0.transactionId == transactionId }
        let since = mine.lastIndex { $0.kind == .reinstatement }.map { $0 + 1 } ?? 0
        return mine[since...].filter { $0.kind == .reversal }.reduce(0) { $0 + $1.debt }
    }

    func grantedCoins(_ transactionId: String) -> Int64? {
        rows.first { $0.kind == .grant && $0.transactionId == transactionId }?.delta
    }

    func entitlement(original: String) -> EntitlementRecord? { entitlementRows[original] }

    func insertEntitlement(_ record: EntitlementRecord) {
        precondition(entitlementRows[record.originalTransactionId] == nil, "one entitlement per original")
        entitlementRows[record.originalTransactionId] = record
    }

    func updateEntitlement(_ record: EntitlementRecord) {
        entitlementRows[record.originalTransactionId]?.entitlement = record.entitlement
        entitlementRows[record.originalTransactionId]?.productId = record.productId
        entitlementRows[record.originalTransactionId]?.startsAtMs = record.startsAtMs
        entitlementRows[record.originalTransactionId]?.expiresAtMs = record.expiresAtMs
        entitlementRows[record.originalTransactionId]?.revokedAtMs = record.revokedAtMs
    }

    func entitlements(_ holder: Holder, activeAtMs: Int64?) -> [EntitlementRecord] {
        entitlementRows.values.filter {
            $0.holder == holder && $0.revokedAtMs == nil && (activeAtMs == nil || $0.expiresAtMs.map { $0 > activeAtMs! } ?? true)
        }
    }

    func wallet(_ holder: Holder) -> Wallet { wallets[holder] ?? Wallet() }

    func append(_ row: LedgerRow) {
        precondition(row.balance >= 0 && row.owed >= 0, "balances and debts never go below zero")
        if let id = row.transactionId, [.grant, .recovery].contains(row.kind) {
            precondition(!rows.contains { $0.kind == row.kind && $0.transactionId == id }, "one \(row.kind) row per transaction")
        }
        rows.append(row)
        wallets[row.holder] = Wallet(balance: row.balance, owed: row.owed)
    }

    /// Events appended, in order, with the wallet of their scope at the time (as the SQL insert reads it).
    var events: [FulfillmentEvent] = []
    func appendEvent(_ event: FulfillmentEvent) {
        var e = event
        let wallet = wallet(Holder(accountId: e.accountId, scope: e.scope))
        e.sequence = Int64(events.filter { $0.accountId == e.accountId }.count + 1)
        e.balance = wallet.balance
        e.owed = wallet.owed
        events.append(e)
    }

    var accountTokenTies: [PendingAccountToken] = []
    /// Transaction ids owed a Finish Transaction at Apple, in the order owed.
    var finishes: [String] = []
    /// Consumption answers owed (key, payload), oldest first.
    var consumptionAnswers: [(key: String, payload: String)] = []
    func enqueueOutbox(kind: OutboxKind, key: String, payload: String, nowMs: Int64) {
        if kind == .finishTransaction, !finishes.contains(key) { finishes.append(key) }
        if kind == .consumptionInformation {
            consumptionAnswers.removeAll { $0.key == key }
            consumptionAnswers.append((key, payload))
        }
        guard kind == .appAccountToken else { return }
        accountTokenTies.removeAll { $0.originalTransactionId == key }
        accountTokenTies.append(PendingAccountToken(originalTransactionId: key, appAccountToken: payload))
    }

    /// Google Play packages remembered, by purchase token.
    var playPackages: [String: String] = [:]
    func rememberPlayPackage(purchaseToken: String, packageName: String) {
        if playPackages[purchaseToken] == nil { playPackages[purchaseToken] = packageName }
    }

    func spend(_ holder: Holder, idempotencyKey: String) -> RecordedSpend? {
        rows.first { $0.holder == holder && $0.idempotencyKey == idempotencyKey }.map {
            RecordedSpend(delta: $0.delta, balance: $0.balance, memo: $0.memo)
        }
    }

    /// balance = sum(delta) and owed = sum(debt) - sum(recovered), for every holder.
    var invariantsHold: Bool {
        wallets.allSatisfy { holder, wallet in
            let mine = rows.filter { $0.holder == holder }
            return wallet.balance == mine.reduce(0) { $0 + $1.delta } && wallet.owed == mine.reduce(0) { $0 + $1.debt - $1.recovered }
        }
    }
}
