import Foundation
import GRDB
import IAPProtocol
import ServiceSupport

/// The catalog database: products with their localizations and grants, admin-set prices, and a
/// revision number bumped by every change (so other instances notice within their cache TTL).
public final class CatalogStore: CatalogStorage, Sendable {
    private let writer: any DatabaseWriter

    public static func open(directory: URL) throws -> CatalogStore {
        var config = Configuration()
        config.foreignKeysEnabled = true
        config.busyMode = .timeout(5)
        return try CatalogStore(
            writer: DatabasePool(path: try PrivateFiles.databaseFile(directory.appendingPathComponent("catalog.sqlite").path), configuration: config))
    }

    /// Closes the database: the WAL is checkpointed and removed, so nothing is left needing recovery.
    /// Called once, after the server has drained (a `ClosingService` in the executable's group).
    public func close() throws {
        if let pool = writer as? DatabasePool { try pool.close() } else if let queue = writer as? DatabaseQueue { try queue.close() }
    }

    public init(writer: any DatabaseWriter) throws {
        self.writer = writer
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE product (
                        productId TEXT PRIMARY KEY NOT NULL,
                        definition TEXT NOT NULL,          -- ProductDefinition JSON (without prices)
                        status TEXT NOT NULL CHECK (status IN ('active', 'retired'))
                    ) WITHOUT ROWID;
                    CREATE TABLE price (
                        productId TEXT NOT NULL REFERENCES product(productId) ON DELETE CASCADE,
                        storefront TEXT NOT NULL CHECK (length(storefront) = 3),
                        currency TEXT NOT NULL CHECK (length(currency) = 3),
                        amountMinor INTEGER NOT NULL CHECK (amountMinor >= 0),
                        PRIMARY KEY (productId, storefront)
                    ) WITHOUT ROWID;
                    CREATE INDEX price_by_storefront ON price(storefront);
                    CREATE TABLE catalogRevision (id INTEGER PRIMARY KEY CHECK (id = 1), revision INTEGER NOT NULL);
                    INSERT INTO catalogRevision (id, revision) VALUES (1, 0);
                    """)
        }
        try m.migrate(writer)
    }

    public func revision() async throws -> Int64 {
        try await writer.read { db in try Int64.fetchOne(db, sql: "SELECT revision FROM catalogRevision")! }
    }

    public func snapshot() async throws -> CatalogSnapshot {
        try await writer.read { db in
            let revision = try Int64.fetchOne(db, sql: "SELECT revision FROM catalogRevision")!
            let rows = try Row.fetchAll(db, sql: "SELECT definition, status FROM product ORDER BY productId")
            let decoder = JSONDecoder()
            let products = try rows.map { row -> (ProductDefinition, ProductStatus) in
                let json: String = row["definition"]
                let definition = try decoder.decode(ProductDefinition.self, from: Data(json.utf8))
                return (definition, ProductStatus(rawValue: row["status"]) ?? .active)
            }
            return CatalogSnapshot(revision: revision, products: products)
        }
    }

    /// Creates or replaces products (and, where given, their prices) in one transaction.
    public func upsert(_ products: [(ProductDefinition, [StoredPrice]?)], allowGrantChange: Bool) async throws {
        try await writer.write { db in
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            let decoder = JSONDecoder()
            for (i, (definition, prices)) in products.enumerated() {
                // What the import leaves out stays as stored.
                let before = try Row.fetchOne(
                    db, sql: "SELECT definition, status FROM product WHERE productId = ?", arguments: [definition.productId]
                )
                .map { row -> (ProductDefinition, ProductStatus) in
                    let json: String = row["definition"]
                    return (try decoder.decode(ProductDefinition.self, from: Data(json.utf8)), ProductStatus(rawValue: row["status"]) ?? .active)
                }
                if let before, !allowGrantChange { try definition.refuseFixedChange(from: before.0, path: "products[\(i)]") }
                let (stored, status) = definition.keepingUnsaid(stored: before)
                // Kept retention rules must still name offers the product has (as `setOffers` refuses removing one in use).
                if let rules = stored.retention { try RetentionValidation.check(rules, product: stored, field: "products[\(i)].offers") }
                let json = String(decoding: try encoder.encode(stored), as: UTF8.self)
                try db.execute(
                    sql: """
                        INSERT INTO product (productId, definition, status) VALUES (?, ?, ?)
                        ON CONFLICT(productId) DO UPDATE SET definition = excluded.definition, status = excluded.status
                        """, arguments: [definition.productId, json, status.rawValue])
                if let prices { try Self.replacePrices(db, productId: definition.productId, prices) }
            }
            try PlayClaims.refuseShared(
                try String.fetchAll(db, sql: "SELECT definition FROM product").map {
                    try decoder.decode(ProductDefinition.self, from: Data($0.utf8))
                },
                written: Set(products.map(\.0.productId)))
            try Self.bumpRevision(db)
        }
    }

    public func amend(productId: String, _ change: @escaping @Sendable (inout ProductDefinition) throws -> Void) async throws -> CatalogChange {
        try await writer.write { db in
            guard let json = try String.fetchOne(db, sql: "SELECT definition FROM product WHERE productId = ?", arguments: [productId]) else {
                return .notFound
            }
            var definition = try JSONDecoder().decode(ProductDefinition.self, from: Data(json.utf8))
            try change(&definition)
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            let amended = String(decoding: try encoder.encode(definition), as: UTF8.self)
            try db.execute(sql: "UPDATE product SET definition = ? WHERE productId = ?", arguments: [amended, productId])
            try Self.bumpRevision(db)
            return .done
        }
    }

    public func setPrices(productId: String, _ prices: [StoredPrice]) async throws -> CatalogChange {
        try await writer.write { db in
            guard try Bool.fetchOne(db, sql: "SELECT 1 FROM product WHERE productId = ?", arguments: [productId]) == true else { return .notFound }
            try Self.replacePrices(db, productId: productId, prices)
            try Self.bumpRevision(db)
            return .done
        }
    }

    public func retire(productId: String) async throws -> CatalogChange {
        try await writer.write { db in
            try db.execute(sql: "UPDATE product SET status = 'retired' WHERE productId = ?", arguments: [productId])
            guard db.changesCount == 1 else { return .notFound }
            try Self.bumpRevision(db)
            return .done
        }
    }

    /// Admin-set prices of one storefront: productId -> price.
    public func prices(storefront: String) async throws -> [String: StoredPrice] {
        try await writer.read { db in
            var out: [String: StoredPrice] = [:]
            for row in try Row.fetchAll(
                db, sql: "SELECT productId, currency, amountMinor FROM price WHERE storefront = ?",
                arguments: [storefront])
            {
                out[row["productId"]] = StoredPrice(storefront: storefront, currency: row["currency"], amountMinor: row["amountMinor"])
            }
            return out
        }
    }

    private static func replacePrices(_ db: Database, productId: String, _ prices: [StoredPrice]) throws {
        try db.execute(sql: "DELETE FROM price WHERE productId = ?", arguments: [productId])
        for p in prices {
            try db.execute(
                sql: "INSERT INTO price (productId, storefront, currency, amountMinor) VALUES (?, ?, ?, ?)",
                arguments: [productId, p.storefront, p.currency, p.amountMinor])
        }
    }

    private static func bumpRevision(_ db: Database) throws {
        try db.execute(sql: "UPDATE catalogRevision SET revision = revision + 1 WHERE id = 1")
    }
}
