import NIOConcurrencyHelpers

/// `/readyz`'s answer, worked out at most once per `maxAge` however many ask: each report pings accounts, catalog and
/// fulfillment, and a public door answering every request with three pings would let anyone make the edge ping them as
/// fast as requests arrive. Requests meanwhile share the report being made, or the last one.
final class Readiness: Sendable {
    typealias Report = (ready: Bool, report: [UInt8])
    private let probe: @Sendable () async -> Report
    private let maxAge: Duration
    private let last = NIOLockedValueBox<(startedAt: ContinuousClock.Instant, report: Task<Report, Never>)?>(nil)

    init(maxAge: Duration = .seconds(1), probe: @escaping @Sendable () async -> Report) {
        self.maxAge = maxAge
        self.probe = probe
    }

    func report() async -> Report {
        let now = ContinuousClock.now
        let task = last.withLockedValue { last -> Task<Report, Never> in
            if let last, now - last.startedAt < maxAge { return last.report }
            let made = Task { await probe() }
            last = (now, made)
            return made
        }
        return await task.value
    }
}
