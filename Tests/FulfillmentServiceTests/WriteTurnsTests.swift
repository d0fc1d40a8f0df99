import NIOConcurrencyHelpers
import Testing

@testable import FulfillmentService

/// `WriteTurns` on its own: one write per key at a time, every write runs, and writes sharing keys in any order never
/// wait for each other for ever.
@Suite struct WriteTurnsTests {
    /// How many writes are inside each key at once, and the most seen.
    final class Inside: Sendable {
        private let state = NIOLockedValueBox<(now: [String: Int], most: Int)>(([:], 0))
        func enter(_ keys: [String]) {
            state.withLockedValue { s in
                for key in keys {
                    s.now[key, default: 0] += 1
                    s.most = max(s.most, s.now[key]!)
                }
            }
        }
        func leave(_ keys: [String]) { state.withLockedValue { s in for key in keys { s.now[key]! -= 1 } } }
        var most: Int { state.withLockedValue { $0.most } }
    }

    @Test(.timeLimit(.minutes(1))) func writesWithOneKeyRunOneAtATime() async throws {
        let turns = WriteTurns<String>()
        let inside = Inside()
        let ran = NIOLockedValueBox(0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<50 {
                group.addTask {
                    try await turns.inTurn(["fulfillment:account:ann"]) {
                        inside.enter(["ann"])
                        await Task.yield()
                        inside.leave(["ann"])
                        ran.withLockedValue { $0 += 1 }
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(inside.most == 1)
        #expect(ran.withLockedValue { $0 } == 50)
        #expect(turns.count("fulfillment:account:ann") == 0)
    }

    /// Keys are taken in sorted order: writes holding (a, b) and (b, a) at once all finish.
    @Test(.timeLimit(.minutes(1))) func writesSharingKeysInAnyOrderAllRun() async throws {
        let turns = WriteTurns<String>()
        let inside = Inside()
        let sets = [["a", "b"], ["b", "a"], ["a"], ["b"], ["b", "a", "b"]]
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<200 {
                let keys = sets[i % sets.count]
                group.addTask {
                    try await turns.inTurn(keys) {
                        inside.enter(Array(Set(keys)))
                        await Task.yield()
                        inside.leave(Array(Set(keys)))
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(inside.most == 1)
        #expect(turns.count("a") == 0 && turns.count("b") == 0)
    }

    /// A write that fails still hands the turn on.
    @Test(.timeLimit(.minutes(1))) func aFailedWriteHandsItsTurnOn() async throws {
        struct Refused: Error {}
        let turns = WriteTurns<String>()
        await #expect(throws: Refused.self) { try await turns.inTurn(["k"]) { throw Refused() } }
        #expect(try await turns.inTurn(["k"]) { 7 } == 7)
        #expect(turns.count("k") == 0)
    }
}
