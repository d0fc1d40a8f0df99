import Synchronization
import Testing

@testable import EdgeService

/// `/readyz` pings the three services at most once per `maxAge`, however many ask at once or one after another: a
/// public door must not turn each request into three pings (before, every request made its own).
@Suite struct ReadinessTests {
    @Test func requestsShareOneRoundOfPingsUntilItIsOld() async {
        let probes = Atomic<Int>(0)
        let cached = Readiness(maxAge: .seconds(3600)) {
            probes.add(1, ordering: .relaxed)
            return (true, Array(#"{"accounts":"ok"}"#.utf8))
        }
        await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<64 { group.addTask { await cached.report().ready } }
            for await ready in group { #expect(ready) }
        }
        for _ in 0..<10 { #expect(await cached.report().report == Array(#"{"accounts":"ok"}"#.utf8)) }
        #expect(probes.load(ordering: .relaxed) == 1, "74 requests, one round of pings")

        let fresh = Readiness(maxAge: .zero) {
            probes.add(1, ordering: .relaxed)
            return (false, [])
        }
        for _ in 0..<3 { #expect(await fresh.report().ready == false) }
        #expect(probes.load(ordering: .relaxed) == 4, "an old answer is asked again")
    }
}
