import FulfillmentService
import PostgresSupport
import Testing

/// How a held write takes its values from `run_writes`' array (`HeldStatements.statement`): pure, no server. That the
/// server stores what was meant is `PostgresStoreTests.heldWritesStoreAnyTextExactly`.
struct HeldWritesTests {
    @Test func parametersBecomeTypedElementsOfTheStatementsOwnValues() throws {
        var values: [String] = ["earlier"]
        let sql = try HeldStatements.statement(
            "INSERT INTO t VALUES (?1, ?2, ?10, ?3, ?4, ?5) WHERE x = -?2 AND y ? z",
            [.text("it's'\u{301}"), .int(-5), .bool(true), .null, .blob([0, 255]), .int(6), .int(7), .int(8), .int(9), .int(10)],
            values: &values)
        #expect(
            sql
                == "INSERT INTO t VALUES ( ($1[1]) ,  ($1[2]::bigint) ,  ($1[3]::bigint) ,  ($1[4]::boolean) ,  NULL ,  ($1[5]::bytea) ) WHERE x = - ($1[2]::bigint)  AND y ? z"
        )
        #expect(values == ["earlier", "it's'\u{301}", "-5", "10", "true", "\\x00ff"])
    }

    @Test func aValueIsNeverScannedForParameters() throws {
        // The text of ?1 names ?2: it stays a value, and ?2 is replaced where the statement names it.
        var values: [String] = []
        let sql = try HeldStatements.statement("SELECT ?1, ?2", [.text("?2 $1 ?1"), .int(1)], values: &values)
        #expect(sql == "SELECT  ($1[1]) ,  ($1[2]::bigint) ")
        #expect(values == ["?2 $1 ?1", "1"])
    }

    @Test func aMissingParameterOrNulIsRefused() {
        var values: [String] = []
        #expect(throws: HeldStatements.UnboundParameter.self) { try HeldStatements.statement("SELECT ?2", [.int(1)], values: &values) }
        #expect(throws: HeldStatements.UnboundParameter.self) { try HeldStatements.statement("SELECT ?0", [.int(1)], values: &values) }
        #expect(throws: HeldStatements.UnboundParameter.self) { try HeldStatements.statement("SELECT ?1", [], values: &values) }
        #expect(throws: HeldStatements.UnboundParameter.self) {
            try HeldStatements.statement("SELECT ?1", [.text("a\u{0}b")], values: &values)
        }
    }

    /// A read prepared without parameter types carries them in its text (`TypedReads`, for `PostgresSession.queryPrepared`):
    /// each parameter cast to its value's kind, a NULL left to the server, a value's own text never scanned; a read that
    /// leaves an argument unnamed has no such text (it runs unnamed), and one naming a missing argument is refused.
    @Test func aPreparedReadCarriesItsParametersTypesInItsText() throws {
        #expect(
            try TypedReads.text(
                "SELECT * FROM t WHERE a = ?1 AND b = ?2 AND c = ?3 AND d = ?4 AND e IS ?5 AND f > ?1",
                [
                    .int(1), .text("?2 $1"), .bool(true), .blob([1]), .null,
                ])
                == "SELECT * FROM t WHERE a = ($1::int8) AND b = ($2::text) AND c = ($3::bool) AND d = ($4::bytea) AND e IS $5 AND f > ($1::int8)"
        )
        #expect(try TypedReads.text("SELECT ?2", [.int(1), .int(2)]) == nil)
        #expect(throws: HeldStatements.UnboundParameter.self) { try TypedReads.text("SELECT ?2", [.int(1)]) }
    }

    /// A list of held writes becomes the body of a connection's own function (`WriteFunctions`) only when each statement
    /// is a plain INSERT, UPDATE or DELETE (or a SELECT run for its effect) that can stand in a PL/pgSQL body as it is;
    /// anything else goes to `run_writes`.
    @Test func writeFunctionsTakeOnlyPlainWrites() throws {
        var values: [String] = []
        let first = try HeldStatements.statement(
            "INSERT INTO t (a, b) VALUES (?1, ?2)", [.text("x"), .int(2)], values: &values, numberedFromOne: false)
        let second = try HeldStatements.statement(
            "\n  update t SET b = ?1, c = ?3 WHERE a = ?2 -- a comment", [.int(3), .text("y"), .null], values: &values,
            numberedFromOne: false)
        #expect(
            second == "\n  update t SET b =  ($1[3]::bigint) , c =  NULL  WHERE a =  ($1[4])  -- a comment",
            "numbered on from the first statement's values")
        #expect(values == ["x", "2", "3", "y"])
        #expect(WriteFunctions.body([first, second]) == "#variable_conflict use_column\nBEGIN\n\(first)\n;\n\(second)\n;\nEND")
        #expect(WriteFunctions.body([first, "DELETE FROM t WHERE a = ($1[1])"]) != nil)
        // A SELECT runs for its effect (a check that raises, `yield_to_lock_holders`): PL/pgSQL's PERFORM.
        #expect(
            WriteFunctions.body([" SELECT yield_to_lock_holders( ($1[1]) )", first])
                == "#variable_conflict use_column\nBEGIN\nPERFORM yield_to_lock_holders( ($1[1]) )\n;\n\(first)\n;\nEND")
        for refused in [
            "SELECT 1; DELETE FROM t", "WITH x AS (DELETE FROM t) SELECT 1", "INSERT INTO t VALUES (1) returning a",
            "DELETE FROM t; DROP TABLE t", "UPDATE t SET a = $iap_WRITES$ x", "",
        ] {
            #expect(WriteFunctions.body([first, refused]) == nil, "\(refused)")
        }
    }

    /// A guarded write (one ending in `mustWriteARow`) is followed in its function by the check that it wrote a row, and
    /// only it: the call fails whole with 40001 when the guard held it back.
    @Test func aGuardedWriteIsFollowedByItsRowCheck() throws {
        let plain = "UPDATE t SET a = ($1[1])"
        let guarded = "UPDATE t SET a = ($1[1]) WHERE a = ($1[2])\n" + WriteFunctions.mustWriteARow
        let body = try #require(WriteFunctions.body([plain, guarded]))
        let check = "IF NOT FOUND THEN RAISE EXCEPTION 'a guarded write found what it was decided on changed' USING ERRCODE = '40001'; END IF;\n"
        #expect(body == "#variable_conflict use_column\nBEGIN\n\(plain)\n;\n\(guarded)\n;\n\(check)END")
        #expect(WriteFunctions.body([plain, plain])?.contains("IF NOT FOUND") == false)
    }
}
