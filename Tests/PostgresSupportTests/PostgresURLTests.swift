import PostgresSupport
import Testing

/// The pure parts of PostgresSupport: the database URL (and that its password never reaches a log) and the
/// migration-script splitter.
@Suite struct PostgresURLTests {
    @Test func aDatabaseURLIsParsedAndItsPasswordNeverShown() throws {
        let url = try PostgresURL("postgres://iap%40ops:s3cr%2Ft@db.internal:6432/iap?sslmode=require")
        #expect(url == PostgresURL(host: "db.internal", port: 6432, username: "iap@ops", password: "s3cr/t", database: "iap", sslMode: .require))
        #expect(url.redacted == "postgres://iap@ops:***@db.internal:6432/iap")
        #expect(!"\(url)".contains("s3cr"))
        #expect(try PostgresURL("postgresql://postgres@127.0.0.1/postgres").port == 5432)
        for bad in [
            "mysql://u@h/db", "postgres://h/db", "postgres://u@h", "postgres://u@h/", "postgres://u@h/a/b", "postgres://u@h/db?sslmode=maybe",
            "not a url",
        ] {
            #expect(throws: PostgresURL.Invalid.self, "\(bad)") { try PostgresURL(bad) }
        }
    }

    @Test func migrationScriptsSplitOnlyAtStatementEnds() {
        let sql = """
            -- a comment; with a semicolon
            CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION 'x; y'; END $$;
            CREATE TABLE t (a TEXT DEFAULT 'a;b'); -- trailing; comment
            INSERT INTO t VALUES ('it''s; fine');
            """
        let statements = PostgresSession.statements(sql)
        #expect(statements.count == 3, "\(statements)")
        #expect(statements[0].hasSuffix("END $$"))
        #expect(statements[1].contains("'a;b'"))
        #expect(statements[2].hasSuffix("INSERT INTO t VALUES ('it''s; fine')"))  // a comment before it stays: PostgreSQL skips it
    }
}
