import Foundation
import IAPProtocol
import PostgresNIO
import PostgresSupport

/// The catalog database on PostgreSQL (`--database-url`), for several catalog instances on one database: the same
/// records as `CatalogStore` (SQLite) in the `catalog` schema. Every change bumps the revision and sends
/// `NOTIFY iap_catalog_changed` in its transaction (delivered when it commits), so the other instances re-read
/// the catalog at once (`PostgresListener` + `CatalogService.changedElsewhere`) instead of at their next recheck.
public final class PostgresCatalogStore: CatalogStorage, Sendable {
    let pool: PostgresPool

    /// The channel every write notifies.
    public static let changesChannel = "iap_catalog_changed"

    /// Brings the schema up to date; on failure the pool is closed and the error thrown.
    public init(pool: PostgresPool) async throws {
        self.pool = pool
        try await pool.migrateOrClose(Self.migrations)
    }

    public func close() throws { pool.close() }

    static let migrations: [PostgresMigration] = [
        PostgresMigration(
            "v1",
            """
            CREATE TABLE product (
                product_id TEXT PRIMARY KEY,
                definition TEXT NOT NULL,          -- ProductDefinition JSON (without prices)
                status TEXT NOT NULL CHECK (status IN ('active', 'retired')));
            CREATE TABLE price (
                product_id TEXT NOT NULL REFERENCES product(product_id) ON DELETE CASCADE,
                storefront TEXT NOT NULL CHECK (length(storefront) = 3),
                currency TEXT NOT NULL CHECK (length(currency) = 3),
                amount_minor BIGINT NOT NULL CHECK (amount_minor >= 0),
                PRIMARY KEY (product_id, storefront));
            CREATE INDEX price_by_storefront ON price (storefront);
            CREATE TABLE catalog_revision (id INTEGER PRIMARY KEY CHECK (id = 1), revision BIGINT NOT NULL);
            INSERT INTO catalog_revision (id, revision) VALUES (1, 0);
            """)
    ]

    public func revision() async throws -> Int64 {
        try await pool.read { db in try Self.revision(db) }
    }

    private static func revision(_ db: PostgresSession) throws -> Int64 {
        try db.one("SELECT revision FROM catalog_revision")!.get("revision")
    }

    public func snapshot() async throws -> CatalogSnapshot {
        try await pool.read { db in
            let revision = try Self.revision(db)
            let decoder = JSONDecoder()
            let products = try db.query("SELECT definition, status FROM product ORDER BY product_id").map { row in
                let definition = try decoder.decode(ProductDefinition.self, from: Data(try row.get("definition", as: String.self).utf8))
                return (definition, ProductStatus(rawValue: try row.get("status", as: String.self)) ?? .active)
            }
            return CatalogSnapshot(revision: revision, products: products)
        }
    }

    public func upsert(_ products: [(ProductDefinition, [StoredPrice]?)], allowGrantChange: Bool) async throws {
        try await pool.write { db in
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            let decoder = JSONDecoder()
            for (i, (definition, prices)) in products.enumerated() {
                let productId = definition.productId
                // What the import leaves out stays as stored.
                let before = try db.one("SELECT definition, status FROM product WHERE product_id = \(productId) FOR UPDATE").map { row in
                    (
                        try decoder.decode(ProductDefinition.self, from: Data(try row.get("definition", as: String.self).utf8)),
                        ProductStatus(rawValue: try row.get("status", as: String.self)) ?? .active
                    )
                }
                if let before, !allowGrantChange { try definition.refuseFixedChange(from: before.0, path: "products[\(i)]") }
                let merged = definition.keepingUnsaid(stored: before)
                // Kept retention rules must still name offers the product has (as `setOffers` refuses removing one in use).
                if let rules = merged.definition.retention {
                    try RetentionValidation.check(rules, product: merged.definition, field: "products[\(i)].offers")
                }
                let json = String(decoding: try encoder.encode(merged.definition), as: UTF8.self), status = merged.status.rawValue
                try db.execute(
                    """
                    INSERT INTO product (product_id, definition, status) VALUES (\(productId), \(json), \(status))
                    ON CONFLICT (product_id) DO UPDATE SET definition = excluded.definition, status = excluded.status
                    """)
                if let prices { try Self.replacePrices(db, productId: productId, prices) }
            }
            try PlayClaims.refuseShared(
                try db.query("SELECT definition FROM product").map {
                    try decoder.decode(ProductDefinition.self, from: Data(try $0.get("definition", as: String.self).utf8))
                }, written: Set(products.map(\.0.productId)))
            try Self.bumpRevision(db)
        }
    }

    public func amend(productId: String, _ change: @escaping @Sendable (inout ProductDefinition) throws -> Void) async throws -> CatalogChange {
        try await pool.write { db in
            guard let row = try db.one("SELECT definition FROM product WHERE product_id = \(productId) FOR UPDATE") else { return .notFound }
            var definition = try JSONDecoder().decode(ProductDefinition.self, from: Data(try row.get("definition", as: String.self).utf8))
            try change(&definition)
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            let amended = String(decoding: try encoder.encode(definition), as: UTF8.self)
            try db.execute("UPDATE product SET definition = \(amended) WHERE product_id = \(productId)")
            try Self.bumpRevision(db)
            return .done
        }
    }

    public func setPrices(productId: String, _ prices: [StoredPrice]) async throws -> CatalogChange {
        try await pool.write { db in
            guard try db.one("SELECT 1 AS found FROM product WHERE product_id = \(productId)") != nil else { return .notFound }
            try Self.replacePrices(db, productId: productId, prices)
            try Self.bumpRevision(db)
            return .done
        }
    }

    public func retire(productId: String) async throws -> CatalogChange {
        try await pool.write { db in
            guard try db.execute("UPDATE product SET status = 'retired' WHERE product_id = \(productId)") == 1 else { return .notFound }
            try Self.bumpRevision(db)
            return .done
        }
    }

    public func prices(storefront: String) async throws -> [String: StoredPrice] {
        try await pool.read { db in
            var out: [String: StoredPrice] = [:]
            for row in try db.query("SELECT product_id, currency, amount_minor FROM price WHERE storefront = \(storefront)") {
                out[try row.get("product_id")] = StoredPrice(
                    storefront: storefront, currency: try row.get("currency"), amountMinor: try row.get("amount_minor"))
            }
            return out
        }
    }

    private static func replacePrices(_ db: PostgresSession, productId: String, _ prices: [StoredPrice]) throws {
        try db.execute("DELETE FROM price WHERE product_id = \(productId)")
        for p in prices {
            try db.execute(
                """
                INSERT INTO price (product_id, storefront, currency, amount_minor)
                VALUES (\(productId), \(p.storefront), \(p.currency), \(p.amountMinor))
                """)
        }
    }

    private static func bumpRevision(_ db: PostgresSession) throws {
        let revision: Int64 = try db.one("UPDATE catalog_revision SET revision = revision + 1 WHERE id = 1 RETURNING revision")!.get("revision")
        // Sent when the transaction commits (never for one rolled back or retried).
        try db.execute("SELECT pg_notify(\(changesChannel), \(String(revision)))")
    }
}
