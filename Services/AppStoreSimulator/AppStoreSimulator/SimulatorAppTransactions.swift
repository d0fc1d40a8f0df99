import Foundation
import GRDB
import IAPProtocol
import JSONRPC

/// An Apple ID's app transaction in one app and environment, as the simulator keeps it.
struct SimAppTransactionRecord: Sendable, Equatable {
    var appTransactionId: String
    var appleId: String
    var bundleId: String
    var environment: SimEnvironment
    var originalPurchaseDateMs: Int64
}

extension SimulatorStore {
    /// The app transaction of the Apple ID in this app and environment, if it has one.
    static func appTransaction(appleId: String, bundleId: String, environment: SimEnvironment, db: Database) throws -> SimAppTransactionRecord? {
        try Row.fetchOne(
            db, sql: "SELECT * FROM simAppTransaction WHERE appleId = ? AND bundleId = ? AND environment = ?",
            arguments: [appleId, bundleId, environment.rawValue]
        ).map(record)
    }

    /// The app transaction of the Apple ID in this app and environment, made now if it has none. Ids are numeric like
    /// Apple's, in a range apart from transaction ids (Get App Transaction Info takes either).
    static func appTransactionMade(appleId: String, bundleId: String, environment: SimEnvironment, nowMs: Int64, db: Database) throws
        -> SimAppTransactionRecord
    {
        if let known = try appTransaction(appleId: appleId, bundleId: bundleId, environment: environment, db: db) { return known }
        let count = try Int64.fetchOne(db, sql: "SELECT COUNT(*) FROM simAppTransaction") ?? 0
        let made = SimAppTransactionRecord(
            appTransactionId: String(700_000_000_000 + count + 1), appleId: appleId, bundleId: bundleId, environment: environment,
            originalPurchaseDateMs: nowMs)
        try db.execute(
            sql: "INSERT INTO simAppTransaction (appTransactionId, appleId, bundleId, environment, originalPurchaseDateMs) VALUES (?, ?, ?, ?, ?)",
            arguments: [made.appTransactionId, appleId, bundleId, environment.rawValue, nowMs])
        return made
    }

    static func appTransaction(id: String, db: Database) throws -> SimAppTransactionRecord? {
        try Row.fetchOne(db, sql: "SELECT * FROM simAppTransaction WHERE appTransactionId = ?", arguments: [id]).map(record)
    }

    private static func record(_ r: Row) -> SimAppTransactionRecord {
        SimAppTransactionRecord(
            appTransactionId: r["appTransactionId"], appleId: r["appleId"], bundleId: r["bundleId"],
            environment: SimEnvironment(rawValue: r["environment"]) ?? .sandbox, originalPurchaseDateMs: r["originalPurchaseDateMs"])
    }
}

extension AppStoreSimulator {
    /// `sim.appTransaction`: what `AppTransaction.shared` gives the app of this Apple ID (made on first use).
    public func appTransaction(_ p: SimAppTransaction.Params) throws -> SimAppTransaction.Result {
        guard !p.appleId.isEmpty, !p.bundleId.isEmpty else {
            throw RPCError.invalidParams("appleId and bundleId must not be empty", reason: "emptyField")
        }
        let (record, nowMs) = try write { db in
            let now = try self.now(db)
            let made = try SimulatorStore.appTransactionMade(
                appleId: p.appleId, bundleId: p.bundleId, environment: p.environment ?? .production, nowMs: now, db: db)
            return (made, now)
        }
        return .init(appTransactionId: record.appTransactionId, signedAppTransaction: try signedAppTransaction(record, nowMs: nowMs))
    }

    /// The JWS of an app transaction, with Apple's field names (`JWSAppTransactionDecodedPayload`); `receiptCreationDate`
    /// is when it is signed, as Apple's.
    func signedAppTransaction(_ a: SimAppTransactionRecord, nowMs: Int64) throws -> String {
        var payload: [String: Any] = [
            "appTransactionId": a.appTransactionId, "bundleId": a.bundleId, "receiptType": a.environment.appleName,
            "applicationVersion": "1", "originalApplicationVersion": "1", "originalPlatform": "iOS",
            "originalPurchaseDate": a.originalPurchaseDateMs, "receiptCreationDate": nowMs,
        ]
        if a.environment == .production { payload["appAppleId"] = 1_234_567_890 }
        return try pki.signedPayloads.sign(payload: Array(try JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys])))
    }
}

extension AppStoreServerAPIEndpoint {
    /// Get App Transaction Info: the app transaction of the customer of any of their transaction ids (or its own id), in
    /// this app and environment. 400 4000006 for an id that is not one; 404 4040010 for one this app and environment do
    /// not have; 404 4040019 when the customer has no app transaction (transactions made before the simulator had them).
    func appTransactionInfo(_ id: String, environment: SimEnvironment, bid: String) throws -> [String: Any] {
        guard !id.isEmpty, id.allSatisfy(\.isNumber) else { throw APIError.invalidTransactionId }
        let found = try simulator.store.writer.read { db -> (SimAppTransactionRecord?, Bool, Int64) in
            let now = try self.simulator.now(db)
            if let app = try SimulatorStore.appTransaction(id: id, db: db) { return (app, true, now) }
            guard let t = try SimulatorStore.transaction(id, db: db) else { return (nil, false, now) }
            let app = try SimulatorStore.appTransaction(appleId: t.appleId, bundleId: t.bundleId, environment: t.environment, db: db)
            // The customer is known (their transaction is), their app transaction is not.
            guard let app else { return (nil, t.environment == environment && t.bundleId == bid, now) }
            return (app, true, now)
        }
        guard let app = found.0 else {
            if found.1 { throw APIError(status: .notFound, code: 4_040_019, message: "No AppTransaction exists for the customer.") }
            throw APIError.transactionNotFound
        }
        // Another app's (or environment's) customer is not found for this app, as Apple answers.
        guard app.environment == environment, app.bundleId == bid else { throw APIError.transactionNotFound }
        return ["signedAppTransactionInfo": try simulator.signedAppTransaction(app, nowMs: found.2)]
    }
}
