import IAPProtocol

/// Retention answers, both engines: the facts a rule reads about a subscriber, and each answer recorded once per Apple
/// request, an offer at most once per customer (`retention_offer_once`).
struct RetentionRecords {
    let s: any SQLSession
    static let dayMs: Int64 = 86_400_000

    init(_ session: any SQLSession) { self.s = session }

    /// The subscriber behind an original transaction in one statement: its account and scope, when the subscription was
    /// first bought, its periods after the first not refunded, and the account's refunds.
    func subscriber(originalTransactionId: String, environment: String, nowMs: Int64) throws -> (holder: Holder, facts: RetentionFacts)? {
        guard
            let row = try s.row(
                """
                SELECT o.account_id, o.scope,
                  (SELECT MIN(p.purchase_date_ms) FROM processed_transaction p
                   WHERE p.environment = o.environment AND p.original_transaction_id = o.original_transaction_id) AS first_ms,
                  (SELECT COUNT(*) FROM processed_transaction p WHERE p.environment = o.environment
                   AND p.original_transaction_id = o.original_transaction_id AND p.revoked_at_ms IS NULL
                   AND p.purchase_date_ms > (SELECT MIN(f.purchase_date_ms) FROM processed_transaction f
                                             WHERE f.environment = o.environment AND f.original_transaction_id = o.original_transaction_id))
                   AS renewals,
                  (SELECT COUNT(*) FROM processed_transaction p WHERE p.account_id = o.account_id AND p.scope = o.scope
                   AND p.revoke_reason = 'refunded') AS refunds
                FROM ownership o WHERE o.original_transaction_id = ?1 AND o.environment = ?2
                """, originalTransactionId, environment)
        else { return nil }
        let scopeName: String = try row.get("scope")
        guard let scope = AccountScope(rawValue: scopeName) else { throw StoredValueInvalid(column: "scope", value: scopeName) }
        let first: Int64? = try row.get("first_ms")
        let renewals: Int64 = try row.get("renewals"), refunds: Int64 = try row.get("refunds")
        let tenure = first.map { max(0, Int(($0 > nowMs ? 0 : nowMs - $0) / Self.dayMs)) } ?? 0
        return (
            Holder(accountId: try row.get("account_id"), scope: scope),
            RetentionFacts(known: true, tenureDays: tenure, renewals: Int(renewals), refunds: Int(refunds))
        )
    }

    /// The offers a customer was given in earlier answers, and those redeemed with the subscription's purchases.
    func offersGiven(customerKey: String, environment: String, originalTransactionId: String) throws -> Set<String> {
        Set(
            try s.rows(
                """
                SELECT offer_id FROM retention_answer WHERE customer_key = ?1 AND offer_id IS NOT NULL
                UNION SELECT offer_identifier FROM processed_transaction
                WHERE environment = ?2 AND original_transaction_id = ?3 AND offer_identifier IS NOT NULL
                """, customerKey, environment, originalTransactionId
            ).map { try $0.get("offer_id") })
    }

    /// The answer recorded for an Apple request, as JSON.
    func answer(requestIdentifier: String) throws -> StoredRetentionAnswer? {
        try s.row("SELECT response, choice_id, reason FROM retention_answer WHERE request_identifier = ?1", requestIdentifier).map {
            StoredRetentionAnswer(response: try $0.get("response"), choiceId: try $0.get("choice_id"), reason: try $0.get("reason"))
        }
    }

    /// Records an answer unless its request was answered already or its offer was given to this customer meanwhile
    /// (false: nothing written).
    func record(_ a: RetentionAnswerRecord) throws -> Bool {
        try s.run(
            """
            INSERT INTO retention_answer (request_identifier, customer_key, environment, original_transaction_id, account_id, product_id,
              choice_id, kind, offer_id, response, reason, answered_at_ms)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) ON CONFLICT DO NOTHING
            """, a.requestIdentifier, a.customerKey, a.environment, a.originalTransactionId, a.accountId, a.productId, a.choiceId, a.kind,
            a.offerId, a.response, a.reason, a.answeredAtMs) == 1
    }
}

public struct StoredRetentionAnswer: Sendable, Equatable {
    public var response: String
    public var choiceId: String?
    public var reason: String?
}

public struct RetentionAnswerRecord: Sendable, Equatable {
    var requestIdentifier: String
    var customerKey: String
    var environment: String
    var originalTransactionId: String
    var accountId: String?
    var productId: String
    var choiceId: String?
    /// `message`, `alternateProduct`, `promotionalOffer`, or `none`.
    var kind: String
    var offerId: String?
    /// The RealtimeResponseBody answered, as JSON.
    var response: String
    var reason: String?
    var answeredAtMs: Int64
}

/// What a retention answer reads first, in one read: the answer already given to the request, the subscriber, and the
/// offers the subscription was given or redeemed.
public struct RetentionContext: Sendable {
    public var earlier: StoredRetentionAnswer?
    public var subscriber: (holder: Holder, facts: RetentionFacts)?
    public var offersGiven: Set<String>
}

/// What retention answers read and write (`RetentionRecords`).
public protocol RetentionStorage: Sendable {
    func retentionContext(requestIdentifier: String, customerKey: String, environment: String, originalTransactionId: String, nowMs: Int64)
        async throws -> RetentionContext
    func retentionOffersGiven(customerKey: String, environment: String, originalTransactionId: String) async throws -> Set<String>
    func retentionAnswer(requestIdentifier: String) async throws -> StoredRetentionAnswer?
    func recordRetentionAnswer(_ answer: RetentionAnswerRecord) async throws -> Bool
}

extension RetentionStorage where Self: FulfillmentDatabase {
    public func retentionContext(
        requestIdentifier: String, customerKey: String, environment: String, originalTransactionId: String, nowMs: Int64
    ) async throws -> RetentionContext {
        try await read { s in
            let records = RetentionRecords(s)
            if let earlier = try records.answer(requestIdentifier: requestIdentifier) {
                return RetentionContext(earlier: earlier, subscriber: nil, offersGiven: [])
            }
            return RetentionContext(
                earlier: nil,
                subscriber: try records.subscriber(originalTransactionId: originalTransactionId, environment: environment, nowMs: nowMs),
                offersGiven: try records.offersGiven(
                    customerKey: customerKey, environment: environment, originalTransactionId: originalTransactionId))
        }
    }

    public func retentionOffersGiven(customerKey: String, environment: String, originalTransactionId: String) async throws -> Set<String> {
        try await read { s in
            try RetentionRecords(s).offersGiven(customerKey: customerKey, environment: environment, originalTransactionId: originalTransactionId)
        }
    }

    public func retentionAnswer(requestIdentifier: String) async throws -> StoredRetentionAnswer? {
        try await read { s in try RetentionRecords(s).answer(requestIdentifier: requestIdentifier) }
    }

    public func recordRetentionAnswer(_ answer: RetentionAnswerRecord) async throws -> Bool {
        try await write { s in try RetentionRecords(s).record(answer) }
    }
}
