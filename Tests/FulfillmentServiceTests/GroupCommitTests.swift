import Foundation
import GRDB
import Testing

@testable import FulfillmentService

/// Group commit on a real SQLite file: operations share commits, yet each stands or falls alone.
@Suite struct GroupCommitTests {
    struct Refused: Error {}

    @Test func aFailingOperationRollsBackOnlyItselfAndEveryOtherIsCommitted() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("group-\(UUID().uuidString).sqlite").path
        let pool = try DatabasePool(path: path)
        try await pool.write { db in try db.execute(sql: "CREATE TABLE item (id INTEGER PRIMARY KEY, n INTEGER NOT NULL UNIQUE)") }
        let commits = GroupCommit(writer: pool, maxBatch: 16)
        let outcomes = await withTaskGroup(of: (Int, Bool).self) { group in
            for i in 0..<300 {
                group.addTask {
                    do {
                        try await commits.write { db in
                            try db.execute(sql: "INSERT INTO item (n) VALUES (?)", arguments: [i])
                            if i % 3 == 0 { throw Refused() }  // after its insert: the savepoint must undo it
                            if i % 5 == 0 { try db.execute(sql: "INSERT INTO item (n) VALUES (?)", arguments: [i]) }  // UNIQUE fails
                        }
                        return (i, true)
                    } catch {
                        return (i, false)
                    }
                }
            }
            var all: [(Int, Bool)] = []
            for await o in group { all.append(o) }
            return all
        }
        let expected = Set((0..<300).filter { $0 % 3 != 0 && $0 % 5 != 0 })
        #expect(Set(outcomes.filter(\.1).map(\.0)) == expected)
        let stored = try await pool.read { db in try Int.fetchAll(db, sql: "SELECT n FROM item") }
        #expect(Set(stored) == expected && stored.count == expected.count)
        // Results come back to the caller that asked.
        let answer = try await commits.write { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM item")! }
        #expect(answer == expected.count)
    }
}
