import FulfillmentService
import IAPProtocol
import JSONRPC
import RPCTestSupport
import Testing

/// A purchase's first redeem racing a notification about it, on PostgreSQL, where the two are different transactions
/// that read different rows (the redeem runs alone or at REPEATABLE READ, the notification SERIALIZABLE): whichever
/// commits first, the purchase ends as the store says. Both decide a transaction id's fate from the same unseen state,
/// and both insert its claim (`transaction_claim`), a plain INSERT that meets the other's committed or in-flight row
/// whatever the snapshot, so the second runs again on the first's records.
@Suite(.enabled(if: TestPostgres.isAvailable, "PostgreSQL is not installed"), .serialized)
struct EarlyRefundRaceTests {
    static let n = 80
    static func id(_ i: Int) -> String { "\(2_000_001_000 + i)" }
    static func uuid(_ i: Int) -> String { "6a1f0c1e-0000-4000-8000-\(String(format: "%012d", i))" }

    static func inbox(_ i: Int, _ type: String, signedMs: Int64, in store: PostgresFulfillmentStore) async throws {
        _ = try await store.recordNotification(
            InboxEntry(
                notificationUUID: uuid(i), notificationType: type, subtype: nil, signedDateMs: signedMs, signedPayload: "h.p.s",
                notification: Array("{}".utf8), receivedAtMs: signedMs, nextAttemptAtMs: signedMs, originalTransactionId: id(i % n)))
    }

    static func refund(_ i: Int, in store: PostgresFulfillmentStore) async throws {
        let refunded = VerifiedPurchase(
            environment: "Production", transactionId: id(i), originalTransactionId: id(i), productId: "coins.100", purchaseDateMs: 1,
            cancellationDateMs: 2)
        _ = try await PostgresStoreTests.retried {
            try await store.applyNotification(
                NotificationRulesTests.facts(.refund, "REFUND", snapshot: refunded, signed: 2), uuid: uuid(i), attempts: 1, owed: [], nowMs: 3)
        }
    }

    static func redeem(_ i: Int, in store: PostgresFulfillmentStore) async throws {
        _ = try await PostgresStoreTests.retried {
            try await store.apply(
                [coins(id(i))], accountId: "kim\(i)", appAccountToken: nil, mode: .redeem, policy: .refuse, answerScope: .production, nowMs: 3)
        }
    }

    /// Each of 80 purchases redeemed (by an account of its own, so most redeems run alone: two statements without a
    /// transaction) and refunded at once: every one ends refunded, no coins left. (Before the claim, a
    /// refund committed between the redeem's read and its writes was remembered as early for a redeem that had already
    /// decided to grant: 7-13 of 80 lost per run.)
    @Test func aRefundRecordedWhileItsPurchaseIsRedeemedIsNeverLost() async throws {
        let database = try await TestDatabase.make(schema: "fulfillment", connections: 8, label: "early-refund-test")
        let store = try await PostgresFulfillmentStore(pool: database.pool)
        defer { try? store.close() }
        for i in 0..<Self.n { try await Self.inbox(i, "REFUND", signedMs: 2, in: store) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<Self.n {
                group.addTask { try await Self.redeem(i, in: store) }
                group.addTask { try await Self.refund(i, in: store) }
            }
            try await group.waitForAll()
        }
        #expect(try await store.count("SELECT SUM(balance + owed) FROM fulfillment.wallet") == 0, "every refund applied")
        let revoked = try await store.count("SELECT COUNT(*) FROM fulfillment.processed_transaction WHERE revoked_at_ms IS NOT NULL")
        #expect(revoked == Self.n)
        #expect(try await store.ledgerMismatches().isEmpty)
        #expect(try await store.claimMismatches().isEmpty)
    }

    /// Each of 80 purchases refunded before its redeem, then redeemed while Apple's reversal of that refund arrives: every
    /// one ends granted (the redeem records it revoked and the reversal gives it back, or the reversal forgets the early
    /// refund and the redeem grants).
    @Test func aRefundReversedWhileItsPurchaseIsRedeemedIsNeverLost() async throws {
        let database = try await TestDatabase.make(schema: "fulfillment", connections: 8, label: "early-reversal-test")
        let store = try await PostgresFulfillmentStore(pool: database.pool)
        defer { try? store.close() }
        for i in 0..<Self.n {
            try await Self.inbox(i, "REFUND", signedMs: 2, in: store)
            try await Self.refund(i, in: store)
            try await Self.inbox(Self.n + i, "REFUND_REVERSED", signedMs: 50, in: store)
        }
        #expect(try await store.count("SELECT COUNT(*) FROM fulfillment.early_revocation") == Self.n)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<Self.n {
                group.addTask { try await Self.redeem(i, in: store) }
                group.addTask {
                    let valid = VerifiedPurchase(
                        environment: "Production", transactionId: Self.id(i), originalTransactionId: Self.id(i), productId: "coins.100",
                        purchaseDateMs: 1)
                    _ = try await PostgresStoreTests.retried {
                        try await store.applyNotification(
                            NotificationRulesTests.facts(.refundReversed, "REFUND_REVERSED", snapshot: valid), uuid: Self.uuid(Self.n + i),
                            attempts: 1, owed: [], nowMs: 4)
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(try await store.count("SELECT SUM(balance) FROM fulfillment.wallet") == 100 * Self.n)
        #expect(try await store.count("SELECT COUNT(*) FROM fulfillment.processed_transaction WHERE revoked_at_ms IS NULL") == Self.n)
        #expect(try await store.ledgerMismatches().isEmpty)
        #expect(try await store.claimMismatches().isEmpty)
    }

    /// A claim without the records it stands for (left by an instance of an older version, which removed an early refund
    /// on its reversal but not the claim it did not know) never stops the purchase's redeem.
    @Test func aClaimLeftWithoutItsRecordsDoesNotStopTheRedeem() async throws {
        let database = try await TestDatabase.make(schema: "fulfillment", connections: 2, label: "orphan-claim-test")
        let store = try await PostgresFulfillmentStore(pool: database.pool)
        defer { try? store.close() }
        _ = try await TestPostgres.psql(database.psqlURL, "INSERT INTO fulfillment.transaction_claim (transaction_id) VALUES ('\(Self.id(0))')")
        #expect(try await store.claimMismatches() == [Self.id(0)])
        let redeemed = try await store.apply(
            [coins(Self.id(0))], accountId: "kim", appAccountToken: nil, mode: .redeem, policy: .refuse, answerScope: .production, nowMs: 3)
        #expect(redeemed.results.map(\.outcome) == [.granted] && redeemed.balance == 100)
        #expect(try await store.claimMismatches().isEmpty)
    }
}
