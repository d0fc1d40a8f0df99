import Foundation
import RPCTestSupport
import Testing

/// `compose/postgres-roles.sh` on a database made before each service had its own login (2026-11-30): the schemas the
/// superuser made are handed to their services with their tables and functions, and running it again changes nothing.
@Suite(.enabled(if: TestPostgres.isAvailable)) struct PostgresRolesTests {
    @Test func aSchemaMadeBeforeIsHandedToItsServiceAndTheScriptRunsTwice() async throws {
        let database = try await TestPostgres.newDatabase()
        _ = try await TestPostgres.psql(
            database,
            """
            CREATE SCHEMA fulfillment; CREATE TABLE fulfillment.ledger (id BIGSERIAL PRIMARY KEY, delta BIGINT);
            CREATE FUNCTION fulfillment.one() RETURNS int LANGUAGE sql AS 'SELECT 1'; INSERT INTO fulfillment.ledger (delta) VALUES (5);
            """)
        let url = try #require(URLComponents(string: database))
        let environment = [
            "POSTGRES_USER": url.user ?? "postgres", "POSTGRES_DB": String(url.path.dropFirst()), "PGHOST": url.host ?? "127.0.0.1",
            "PGPORT": String(url.port ?? 5432), "PATH": (TestPostgres.binDirectory.map { $0 + ":" } ?? "") + "/usr/bin:/bin",
            "IAP_POSTGRES_FULFILLMENT_PASSWORD": "p-\(UUID().uuidString)", "IAP_POSTGRES_ACCOUNTS_PASSWORD": "p-\(UUID().uuidString)",
        ]
        for _ in 0..<2 {
            let run = try await Subprocess.run("/bin/bash", [Judges.repository.path + "/compose/postgres-roles.sh"], environment: environment)
            #expect(run.status == 0 && run.stdout.contains("2 service login(s)"), "\(run.stdout)\(run.stderr)")
        }
        let owners = try await TestPostgres.psql(
            database,
            """
            SELECT (SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'fulfillment') || ' '
                || (SELECT tableowner FROM pg_tables WHERE schemaname = 'fulfillment' AND tablename = 'ledger') || ' '
                || (SELECT proowner::regrole::text FROM pg_proc WHERE proname = 'one')
            """)
        #expect(owners == "iap_fulfillment iap_fulfillment iap_fulfillment")
        let fulfillment = Deployment.login(of: "postgres://iap_fulfillment@postgres:5432/iap", on: database)
        #expect(try await TestPostgres.psql(fulfillment, "INSERT INTO fulfillment.ledger (delta) VALUES (7) RETURNING fulfillment.one() + id") == "3")
        await #expect(throws: TestPostgres.Failure.self) {
            try await TestPostgres.psql(
                Deployment.login(of: "postgres://iap_accounts@postgres:5432/iap", on: database), "SELECT * FROM fulfillment.ledger")
        }
    }
}
