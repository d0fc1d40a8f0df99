import FulfillmentService
import Testing

/// How a held write's values become literals (`SQLLiterals.inlined`): pure, no server. That the server stores
/// what was meant is `PostgresStoreTests.heldWritesStoreAnyTextExactly`.
struct HeldWritesTests {
    @Test func parametersBecomeLiteralsThatCannotJoinTheTextAroundThem() throws {
        let sql = try SQLLiterals.inlined(
            "INSERT INTO t VALUES (?1, ?2, ?10, ?3, ?4, ?5) WHERE x = -?2 AND y ? z",
            [.text("it's"), .int(-5), .bool(true), .null, .blob([0, 255]), .int(6), .int(7), .int(8), .int(9), .int(10)])
        #expect(sql == "INSERT INTO t VALUES ( 'it''s' ,  (-5) ,  10 ,  TRUE ,  NULL ,  '\\x00ff'::bytea ) WHERE x = - (-5)  AND y ? z")
    }

    @Test func aValueIsNeverScannedForParameters() throws {
        // The text of ?1 names ?2: it stays text, and ?2 is replaced once, where the statement names it.
        let sql = try SQLLiterals.inlined("SELECT ?1, ?2", [.text("?2 $1 ?1"), .int(1)])
        #expect(sql == "SELECT  '?2 $1 ?1' ,  1 ")
    }

    @Test func aMissingParameterOrNulIsRefused() {
        #expect(throws: SQLLiterals.UnboundParameter.self) { try SQLLiterals.inlined("SELECT ?2", [.int(1)]) }
        #expect(throws: SQLLiterals.UnboundParameter.self) { try SQLLiterals.inlined("SELECT ?0", [.int(1)]) }
        #expect(throws: SQLLiterals.UnboundParameter.self) { try SQLLiterals.inlined("SELECT ?1", [.text("a\u{0}b")]) }
    }
}
