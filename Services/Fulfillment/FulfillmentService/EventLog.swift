import Foundation
import IAPProtocol
import JSONRPC
import PostgresSupport

// The event feed (docs/events.md): one event per change of a customer's money or access, appended by the rules in the
// change's own transaction (`FulfillmentTransaction.appendEvent`), so an event exists if and only if its change
// committed.

/// Where an event is in the feed. SQLite has one writer: its row ids are commit order (`txOrder` 0). On PostgreSQL several
/// instances commit concurrently and ids are handed out before commit, so an id can become visible after a larger one;
/// there each event also carries its transaction's id (`pg_current_xact_id()`), and a reader is given only events of
/// transactions older than every transaction still running (`pg_snapshot_xmin`), in (transaction, id) order. Every
/// transaction that has not finished by then has a larger transaction id than any event handed out, so a cursor never
/// passes an event that commits later.
public struct EventPosition: Sendable, Equatable, Comparable {
    public var txOrder: Int64
    public var id: Int64

    public init(txOrder: Int64, id: Int64) {
        self.txOrder = txOrder
        self.id = id
    }

    public static let start = EventPosition(txOrder: 0, id: 0)

    /// `"123"` (SQLite) or `"48213.123"` (PostgreSQL); "0" is the start.
    public init?(cursor: String) {
        let parts = cursor.split(separator: ".", omittingEmptySubsequences: false)
        switch parts.count {
        case 1:
            guard let id = Int64(parts[0]), id >= 0 else { return nil }
            self.init(txOrder: 0, id: id)
        case 2:
            guard let tx = Int64(parts[0]), let id = Int64(parts[1]), tx >= 0, id >= 0 else { return nil }
            self.init(txOrder: tx, id: id)
        default: return nil
        }
    }

    public var cursor: String { txOrder == 0 ? "\(id)" : "\(txOrder).\(id)" }

    public static func < (a: EventPosition, b: EventPosition) -> Bool { (a.txOrder, a.id) < (b.txOrder, b.id) }
}

extension FulfillmentTransaction {
    /// Appends an event about `holder`, with the state after the change (its wallet; the entitlement's end when `fill`
    /// sets one) read at the end of what this transaction has written so far.
    func event(
        _ type: FulfillmentEventType, _ holder: Holder, environment: String?, nowMs: Int64, _ fill: (inout FulfillmentEvent) -> Void = { _ in }
    ) throws {
        var e = FulfillmentEvent(
            id: "", cursor: "", accountId: holder.accountId, sequence: 0, type: type, occurredAtMs: nowMs,
            environment: environment ?? holder.scope.rawValue, scope: holder.scope, balance: 0, owed: 0)
        fill(&e)
        try appendEvent(e)
    }

    /// An event about one entitlement: its name, product, original and where its access ends now.
    func event(
        _ type: FulfillmentEventType, about record: EntitlementRecord, holder: Holder? = nil, nowMs: Int64,
        _ fill: (inout FulfillmentEvent) -> Void = { _ in }
    ) throws {
        try event(type, holder ?? record.holder, environment: record.environment, nowMs: nowMs) { e in
            e.store = PurchaseStore.of(originalTransactionId: record.originalTransactionId)
            e.entitlement = record.entitlement
            e.productId = record.productId
            e.originalTransactionId = record.originalTransactionId
            e.entitlementEndsAtMs = record.revokedAtMs ?? record.expiresAtMs
            fill(&e)
        }
    }
}

/// The renewal events between two signed renewal states of one subscription (pure): what the customer or Apple changed.
enum RenewalChanges {
    static func events(from old: RenewalState?, to new: RenewalState) -> [FulfillmentEventType] {
        let wasRenewing = old?.autoRenew ?? true, wasRetrying = old?.inBillingRetry ?? false
        let expired = new.expirationIntent != nil && old?.expirationIntent == nil
        var out: [FulfillmentEventType] = expired ? [.subscriptionExpired] : []
        if new.inBillingRetry, !wasRetrying {
            out.append(new.gracePeriodExpiresAtMs != nil ? .subscriptionGracePeriodEntered : .subscriptionBillingRetryEntered)
        } else if !new.inBillingRetry, wasRetrying, new.expirationIntent == nil {
            out.append(.subscriptionRecovered)
        }
        // Apple turns auto-renew off when it expires a subscription: that is the expiry, not the customer's choice.
        if !expired, new.autoRenew != wasRenewing { out.append(new.autoRenew ? .subscriptionAutoRenewEnabled : .subscriptionAutoRenewDisabled) }
        return out
    }
}

/// An event's place and what an endpoint filters on.
public struct EventHeader: Sendable, Equatable {
    public var position: EventPosition
    public var accountId: String
    public var sequence: Int64
    /// `FulfillmentEventType`'s raw value.
    public var type: String
    public var environment: String
    /// PostgreSQL: committed before the endpoint reading it was added (`WebhookRecords.insert`): not owed to it.
    public var committedBeforeStart = false
}

/// The event table's statements, both engines.
struct EventRecords {
    let s: any SQLSession

    init(_ session: any SQLSession) { self.s = session }

    /// The next sequence of the account and the scope's wallet after the change, read by the insert itself (one
    /// statement). Two transactions of one account racing on PostgreSQL both read the same last sequence: the unique
    /// key refuses the second, which runs again (`PostgresPool`). When this transaction already read the account's last
    /// sequence (`WalletMemo.sequences`), the event takes the number after it: the same number in a transaction (one
    /// snapshot), and, for a write sent apart from its read without one (`writeAfterOneRead`), the one that makes a change
    /// committed in between refuse it.
    func append(_ e: FulfillmentEvent) throws {
        // The service's own streaming encoder: this runs inside the write (on SQLite, the one writer), where Foundation's
        // JSONEncoder cost a redeem about as much as its statements.
        let body = String(decoding: try JSONByteEncoder.encode(e), as: UTF8.self)
        if let last = s.wallets?.sequences[e.accountId] {
            s.wallets?.sequences[e.accountId] = last + 1
            // A guess (`WalletMemo.guessed`) may be up to a minute old (`KnownWallets`): the number alone would not refuse
            // it once events after the guessed one were trimmed (a backdated event is old when written), so the insert
            // checks the account's last event itself, and must write its row.
            let sql = s.wallets?.guessed == nil ? Self.appendNumbered : Self.appendGuarded
            try s.later(sql, e.accountId, e.scope.rawValue, e.type.rawValue, e.occurredAtMs, e.environment, body, last + 1)
            return
        }
        try s.later(Self.appendNext, e.accountId, e.scope.rawValue, e.type.rawValue, e.occurredAtMs, e.environment, body)
    }

    /// `append`'s two statements: numbered by the caller (`?7`), or after the account's last event, read by the insert.
    private static let appendNumbered = appendInsert + " SELECT ?1, ?7, " + appendRest
    private static let appendGuarded =
        appendNumbered + " WHERE (SELECT COALESCE(MAX(sequence), 0) FROM event WHERE account_id = ?1) = ?7 - 1\n"
        + WriteFunctions.mustWriteARow
    private static let appendNext = appendInsert + " SELECT ?1, COALESCE(MAX(sequence), 0) + 1, " + appendRest + " FROM event WHERE account_id = ?1"
    private static let appendInsert = "INSERT INTO event (account_id, sequence, type, occurred_at_ms, environment, balance, owed, body)"
    private static let appendRest = """
        ?3, ?4, ?5, COALESCE((SELECT balance FROM wallet WHERE account_id = ?1 AND scope = ?2), 0),
            COALESCE((SELECT owed FROM wallet WHERE account_id = ?1 AND scope = ?2), 0), ?6
        """

    /// Events after `after` in commit order, at most `limit`; on PostgreSQL only those of transactions older than every
    /// running one (`EventPosition`).
    func list(after: EventPosition, limit: Int, accountId: String?, types: [FulfillmentEventType]?) throws -> [FulfillmentEvent] {
        var sql = "SELECT * FROM event WHERE (tx_order, id) > (?1, ?2) AND \(horizon)"
        var arguments: [SQLValue] = [.int(after.txOrder), .int(after.id), .int(Int64(limit))]
        if let accountId {
            arguments.append(.text(accountId))
            sql += " AND account_id = ?\(arguments.count)"
        }
        if let types, !types.isEmpty {
            sql += " AND type IN (\(s.placeholders(types.count, from: arguments.count + 1)))"
            arguments += types.map { .text($0.rawValue) }
        }
        return try s.fetch(sql + " ORDER BY tx_order, id LIMIT ?3", arguments: arguments).map(Self.event)
    }

    /// What dispatching to a webhook endpoint reads of each event after `after` (`list`'s order and horizon): its columns,
    /// never its body, and whether the snapshot of the endpoint's add (`startSnapshot`, PostgreSQL) saw it committed.
    func headers(after: EventPosition, limit: Int, startSnapshot: String? = nil) throws -> [EventHeader] {
        let before = startSnapshot == nil ? "" : ", pg_visible_in_snapshot(tx_order::text::xid8, ?4::pg_snapshot) AS before_start"
        var arguments: [SQLValue] = [.int(after.txOrder), .int(after.id), .int(Int64(limit))]
        if let startSnapshot { arguments.append(.text(startSnapshot)) }
        return try s.fetch(
            """
            SELECT tx_order, id, account_id, sequence, type, environment\(before) FROM event
            WHERE (tx_order, id) > (?1, ?2) AND \(horizon) ORDER BY tx_order, id LIMIT ?3
            """, arguments: arguments
        ).map {
            EventHeader(
                position: try Self.position($0), accountId: try $0.get("account_id"), sequence: try $0.get("sequence"),
                type: try $0.get("type"), environment: try $0.get("environment"),
                committedBeforeStart: startSnapshot == nil ? false : try $0.get("before_start"))
        }
    }

    /// One account's events after its `sequence`, in order.
    func account(_ accountId: String, afterSequence: Int64, limit: Int) throws -> [FulfillmentEvent] {
        try s.rows("SELECT * FROM event WHERE account_id = ?1 AND sequence > ?2 ORDER BY sequence LIMIT ?3", accountId, afterSequence, limit)
            .map(Self.event)
    }

    /// What a reader may see (`EventPosition`): on PostgreSQL only events of transactions older than every running one.
    private var horizon: String {
        s.dialect == .postgres ? "tx_order < pg_snapshot_xmin(pg_current_snapshot())::text::bigint" : "1 = 1"
    }

    /// Drops at most `limit` events that occurred before `beforeMs`: never an account's latest (its sequence goes on from
    /// it, and ids are never reused), nor one a webhook endpoint takes (its types and environments, space-separated lists)
    /// and has not been delivered yet, nor one past where any
    /// endpoint's dispatch has got to (a dispatch held back by a long transaction elsewhere must find its events there).
    func trim(beforeMs: Int64, limit: Int) throws -> Int {
        try s.run(
            """
            DELETE FROM event WHERE id IN (
                SELECT e.id FROM event e WHERE e.occurred_at_ms < ?1
                  AND e.sequence < (SELECT MAX(x.sequence) FROM event x WHERE x.account_id = e.account_id)
                  AND NOT EXISTS (
                      SELECT 1 FROM webhook_progress p JOIN webhook_endpoint w ON w.id = p.endpoint_id
                      WHERE p.account_id = e.account_id AND p.delivered_sequence < e.sequence
                        AND (w.types = '' OR ' ' || w.types || ' ' LIKE '% ' || e.type || ' %')
                        AND (w.environments = '' OR ' ' || w.environments || ' ' LIKE '% ' || e.environment || ' %'))
                  AND NOT EXISTS (SELECT 1 FROM webhook_endpoint w WHERE (w.dispatched_tx_order, w.dispatched_id) < (e.tx_order, e.id))
                LIMIT ?2)
            """, beforeMs, limit)
    }

    static func position(_ row: SQLRow) throws -> EventPosition {
        EventPosition(txOrder: try row.get("tx_order"), id: try row.get("id"))
    }

    static func event(_ row: SQLRow) throws -> FulfillmentEvent {
        let body: String = try row.get("body")
        guard var e = try? RPCCodec.decodeParams(FulfillmentEvent.self, from: Array(body.utf8)) else {
            throw StoredValueInvalid(column: "body", value: String(body.prefix(80)))
        }
        e.accountId = try row.get("account_id")
        e.sequence = try row.get("sequence")
        e.id = "evt_\(e.accountId)_\(e.sequence)"
        e.cursor = try position(row).cursor
        e.balance = try row.get("balance")
        e.owed = try row.get("owed")
        return e
    }
}

extension FulfillmentEvent {
    /// The purchase an event is about.
    mutating func about(_ p: VerifiedPurchase, delta: Int64? = nil) {
        store = p.store
        productId = p.productId
        transactionId = p.transactionId
        originalTransactionId = p.originalTransactionId
        self.delta = delta
    }

    /// The processed transaction an event is about.
    mutating func about(_ record: ProcessedTransaction, _ transactionId: String, delta: Int64? = nil) {
        store = PurchaseStore.of(originalTransactionId: record.originalTransactionId)
        productId = record.productId
        self.transactionId = transactionId
        originalTransactionId = record.originalTransactionId
        self.delta = delta
    }
}

/// Which store a purchase recorded here came from, by its original transaction id (pure): the App Store's are unsigned
/// 64-bit integers (StoreKit's `Transaction.originalID` is a `UInt64`), written in digits; Google Play's is the purchase
/// token, an opaque string of letters, digits and punctuation. For the events about a record, which keeps no store of its
/// own (a purchase at hand says it: `VerifiedPurchase.store`).
enum PurchaseStore {
    static func of(originalTransactionId id: String) -> String {
        !id.isEmpty && id.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) } ? "appStore" : "googlePlay"
    }
}
