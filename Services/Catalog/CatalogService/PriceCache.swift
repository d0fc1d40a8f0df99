import JSONRPC
import Logging
import ServiceSupport

/// Per-storefront price tables from a `PriceSource`, refreshed as they age:
///
/// - younger than `ttlMs`: served as is;
/// - older, but within `staleWindowMs` after that: served at once while one background fetch refreshes it
///   (stale-while-revalidate);
/// - older still, or never fetched: the caller waits for the fetch;
/// - at most one fetch per storefront at a time, however many callers miss together;
/// - when a fetch fails, the last good table keeps being served (with a warning log), and the next
///   attempt waits `retryAfterFailureMs`; with no good table at all, callers get `1020 unavailable`.
public actor PriceCache {
    public struct Settings: Sendable {
        public var ttlMs: Int64 = 60_000
        public var staleWindowMs: Int64 = 600_000
        public var retryAfterFailureMs: Int64 = 1_000
        public init() {}
    }

    public struct Versioned: Sendable {
        public let table: PriceTable
        /// Changes whenever the table's content changes (not on a refresh that found the same prices).
        public let version: Int
    }

    private struct Entry {
        var table: PriceTable
        var version: Int
        var fetchedAtMs: Int64
        var failedAtMs: Int64?
    }

    private let source: any PriceSource
    private let settings: Settings
    private let clock: ServiceClock
    private let logger: Logger
    private var entries: [String: Entry] = [:]
    private var inflight: [String: Task<Result<Versioned, any Error>, Never>] = [:]
    private var nextVersion = 1
    /// Bumped by `invalidate()`: a fetch that started before it must not store what it read.
    private var generation = 0

    public init(source: any PriceSource, settings: Settings, clock: ServiceClock, logger: Logger) {
        self.source = source
        self.settings = settings
        self.clock = clock
        self.logger = logger
    }

    public func table(for storefront: String) async throws(RPCError) -> Versioned {
        let now = clock.nowMs
        guard let entry = entries[storefront] else {
            return try await refreshNow(storefront, fallback: nil)
        }
        let age = now - entry.fetchedAtMs
        if age < settings.ttlMs { return Versioned(table: entry.table, version: entry.version) }
        let mayRetry = entry.failedAtMs.map { now - $0 >= settings.retryAfterFailureMs } ?? true
        if age < settings.ttlMs + settings.staleWindowMs || !mayRetry {
            if mayRetry { startRefresh(storefront) }
            return Versioned(table: entry.table, version: entry.version)
        }
        return try await refreshNow(storefront, fallback: entry)
    }

    /// Drops cached tables so the next read fetches (after an admin changed prices).
    public func invalidate() {
        entries.removeAll()
        inflight.removeAll()
        generation += 1
    }

    /// Waits for background refreshes in flight (tests use it to observe a refresh's outcome).
    public func settle() async {
        for task in inflight.values { _ = await task.value }
    }

    private func refreshNow(_ storefront: String, fallback: Entry?) async throws(RPCError) -> Versioned {
        switch await startRefresh(storefront).value {
        case .success(let versioned):
            return versioned
        case .failure:
            if let fallback { return Versioned(table: fallback.table, version: fallback.version) }
            throw RPCError.unavailable(
                "prices for \(storefront) are unavailable: the price source \(source.name) failed",
                reason: "priceSourceUnavailable")
        }
    }

    /// The fetch in flight for `storefront`, or a new one. The task records its outcome in the cache
    /// before anyone awaiting it resumes.
    @discardableResult
    private func startRefresh(_ storefront: String) -> Task<Result<Versioned, any Error>, Never> {
        if let running = inflight[storefront] { return running }
        let source = self.source
        let generation = self.generation
        let task = Task { () -> Result<Versioned, any Error> in
            let fetched: Result<PriceTable, any Error>
            do { fetched = .success(try await source.fetch(storefront: storefront)) } catch { fetched = .failure(error) }
            return self.record(storefront, fetched, generation: generation)
        }
        inflight[storefront] = task
        return task
    }

    private func record(_ storefront: String, _ fetched: Result<PriceTable, any Error>, generation: Int) -> Result<Versioned, any Error> {
        guard generation == self.generation else {
            // Read before an invalidation: answer this caller, keep nothing.
            return fetched.map { Versioned(table: $0, version: 0) }
        }
        inflight[storefront] = nil
        let now = clock.nowMs
        switch fetched {
        case .success(let table):
            var entry = entries[storefront] ?? Entry(table: table, version: 0, fetchedAtMs: now, failedAtMs: nil)
            if entry.version == 0 || entry.table != table {
                entry.table = table
                entry.version = nextVersion
                nextVersion += 1
            }
            entry.fetchedAtMs = now
            entry.failedAtMs = nil
            entries[storefront] = entry
            return .success(Versioned(table: entry.table, version: entry.version))
        case .failure(let error):
            if entries[storefront] != nil {
                entries[storefront]?.failedAtMs = now
                logger.warning(
                    "price source failed; serving the last good prices",
                    metadata: ["storefront": "\(storefront)", "source": "\(source.name)", "error": "\(error)"])
            } else {
                logger.error(
                    "price source failed and no prices are cached",
                    metadata: ["storefront": "\(storefront)", "source": "\(source.name)", "error": "\(error)"])
            }
            return .failure(error)
        }
    }
}
