import IAPProtocol

/// What an operator's coin adjustment did.
public enum AdjustOutcome: Sendable, Equatable {
    /// Written now: its ledger row and the wallet after it.
    case adjusted(LedgerEntry, Wallet)
    /// The key had already adjusted this holder (account and scope) with the same delta: that row, nothing done again (the
    /// reason is not compared: the first call's stands in the audit).
    case replayed(LedgerEntry, Wallet)
    /// The key was used before for this holder with another delta or kind of row.
    case keyConflict
    /// A take-back larger than the balance: refused, never below zero.
    case insufficient(balance: Int64)
}

/// The operator's audit facts that travel with an adjustment into the same transaction.
public struct AuditFacts: Sendable, Equatable {
    public var action: String
    public var reason: String
    public var credential: String
    public var operatorName: String?
    public init(action: String, reason: String, credential: String, operatorName: String?) {
        self.action = action
        self.reason = reason
        self.credential = credential
        self.operatorName = operatorName
    }
}

extension GrantRules {
    /// Gives (`delta` > 0) or takes back (`delta` < 0) coins as one `adjustment` ledger row, once per (holder, key): never
    /// an edit of the balance, never below zero, and what is owed untouched (only grants repay it). The row, its
    /// `coins.adjusted` event and the audit entry commit together. The row's memo is `memo` (the customer reads their
    /// ledger): the operator's reason, which may be an internal note, goes to the audit entry and the event only.
    static let memo = "support adjustment"

    static func adjust(
        _ holder: Holder, delta: Int64, idempotencyKey: String, audit: AuditFacts, nowMs: Int64, in s: any SQLSession
    ) throws -> AdjustOutcome {
        let tx = FulfillmentRecords(s)
        let records = CustomerRecords(s)
        if let earlier = try records.ledgerRow(holder, idempotencyKey: idempotencyKey) {
            guard earlier.kind == .adjustment, earlier.delta == delta else { return .keyConflict }
            return .replayed(earlier, try tx.wallet(holder))
        }
        let before = try tx.wallet(holder)
        guard delta > 0 || before.balance >= -delta else { return .insufficient(balance: before.balance) }
        let after = try append(holder, delta: delta, kind: .adjustment, idempotencyKey: idempotencyKey, memo: Self.memo, nowMs: nowMs, in: tx)
        try tx.event(.coinsAdjusted, holder, environment: nil, nowMs: nowMs) {
            $0.delta = delta
            $0.reason = audit.reason
        }
        try FulfillmentQueries(s).recordAudit(
            audit.action, accountId: holder.accountId, transactionId: nil, reason: audit.reason, credential: audit.credential,
            operatorName: audit.operatorName, nowMs: nowMs)
        guard let row = try records.ledgerRow(holder, idempotencyKey: idempotencyKey) else {
            throw StoredValueInvalid(column: "ledger", value: idempotencyKey)
        }
        return .adjusted(row, after)
    }
}

/// What the support console reads and writes about one customer (`CustomerRecords`, `GrantRules.adjust`).
public protocol CustomerStorage: Sendable {
    func adjust(_ holder: Holder, delta: Int64, idempotencyKey: String, audit: AuditFacts, nowMs: Int64) async throws -> AdjustOutcome
    func customer(accountId: String, ledgerLimit: Int, nowMs: Int64) async throws -> FulfillmentGetCustomer.Result
    func accountId(transactionId: String) async throws -> String?
    func audit(accountId: String, limit: Int) async throws -> [AuditEntry]
    /// The last `days` UTC days of Production purchases, grants, refunds and revenue, and what waits now.
    func overview(days: Int, nowMs: Int64) async throws -> FulfillmentGetOverview.Result
    /// Sets a parked notification aside (`ignored`, the reason as its last error) with its audit entry, in one transaction.
    func dismiss(notificationUUID: String, reason: String, audit: AuditFacts, nowMs: Int64) async throws -> DismissOutcome
}

public enum DismissOutcome: Sendable, Equatable {
    case dismissed
    case unknown
    /// Not parked (pending, applied or ignored): left as it is.
    case notParked(NotificationState)
}

extension CustomerStorage where Self: FulfillmentDatabase & FulfillmentStorage {
    /// An operator's coin adjustment in one transaction (`GrantRules.adjust`).
    public func adjust(_ holder: Holder, delta: Int64, idempotencyKey: String, audit: AuditFacts, nowMs: Int64) async throws -> AdjustOutcome {
        try await write(locking: Self.accountLock(holder.accountId)) { s in
            try GrantRules.adjust(holder, delta: delta, idempotencyKey: idempotencyKey, audit: audit, nowMs: nowMs, in: s)
        }
    }

    /// Everything about one customer: each scope's wallet, entitlements and newest ledger rows, then its purchases and
    /// notifications (each read over committed data).
    public func customer(accountId: String, ledgerLimit: Int, nowMs: Int64) async throws -> FulfillmentGetCustomer.Result {
        let scopes = try await AccountScope.allCases.asyncMap { scope in
            let now = try await self.entitlements(accountId: accountId, scope: scope, nowMs: nowMs)
            let ledger = try await self.read { s in
                try CustomerRecords(s).newestLedger(Holder(accountId: accountId, scope: scope), limit: ledgerLimit)
            }
            return CustomerScope(environment: scope, balance: now.balance, owed: now.owed, entitlements: now.entitlements, ledger: ledger)
        }
        return try await read { s in
            let records = CustomerRecords(s)
            return .init(
                accountId: accountId, scopes: scopes, purchases: try records.purchases(accountId),
                notifications: try records.notifications(accountId, limit: 200))
        }
    }

    /// The account holding a purchase, by its transaction id or original transaction id.
    public func accountId(transactionId: String) async throws -> String? {
        try await read { s in try CustomerRecords(s).accountId(transactionId: transactionId) }
    }

    /// The audit entries about one account, newest first.
    public func audit(accountId: String, limit: Int) async throws -> [AuditEntry] {
        try await read { s in try CustomerRecords(s).audit(accountId: accountId, limit: limit) }
    }

    public func dismiss(notificationUUID: String, reason: String, audit: AuditFacts, nowMs: Int64) async throws -> DismissOutcome {
        try await write { s in
            guard
                let row = try s.row(
                    "SELECT state, original_transaction_id FROM notification_inbox WHERE notification_uuid = ?1", notificationUUID)
            else { return .unknown }
            let raw: String = try row.get("state")
            guard let state = NotificationState(rawValue: raw) else { throw StoredValueInvalid(column: "state", value: raw) }
            guard state == .parked else { return .notParked(state) }
            try s.run(
                """
                UPDATE notification_inbox SET state = 'ignored', last_error = ?1, processed_at_ms = ?2
                WHERE notification_uuid = ?3 AND state = 'parked'
                """, "dismissed by an operator: \(reason)", nowMs, notificationUUID)
            let original: String? = try row.get("original_transaction_id")
            let owner = try original.flatMap { try CustomerRecords(s).accountId(transactionId: $0) }
            try FulfillmentQueries(s).recordAudit(
                audit.action, accountId: owner, transactionId: original, reason: "\(notificationUUID): \(reason)", credential: audit.credential,
                operatorName: audit.operatorName, nowMs: nowMs)
            return .dismissed
        }
    }

    public func overview(days: Int, nowMs: Int64) async throws -> FulfillmentGetOverview.Result {
        try await read { s in try OverviewRecords(s).overview(days: days, nowMs: nowMs) }
    }
}

extension Array {
    fileprivate func asyncMap<T>(_ transform: (Element) async throws -> T) async throws -> [T] {
        var out: [T] = []
        for element in self { out.append(try await transform(element)) }
        return out
    }
}
