import Logging
import PostgresSupport
import RPCTestSupport

/// A new, empty database on the test server (`TestPostgres`) and a pool on it.
struct TestDatabase {
    let url: PostgresURL
    let pool: PostgresPool

    /// `url` as `TestPostgres.psql` takes it (the `postgresql://` scheme).
    var psqlURL: String { url.description.replacingOccurrences(of: "postgres://", with: "postgresql://") }

    static func make(schema: String = "public", connections: Int = 1, label: String) async throws -> TestDatabase {
        let url = try PostgresURL(try await TestPostgres.newDatabase())
        return TestDatabase(url: url, pool: try PostgresPool(url: url, schema: schema, connections: connections, logger: Logger(label: label)))
    }
}
