import Foundation
import NIOConcurrencyHelpers
import PostgresSupport

/// Sessions this instance read from PostgreSQL lately, so `authenticate` (once per redeem, spend and every other
/// account-scoped call) answers from memory on the event loop instead of a round trip: on PostgreSQL the lookup cost
/// accounts 0.35-0.55 ms of CPU per call and the server a statement (Benchmarks/README.md).
///
/// A revocation must still reach every instance. Each one (sign-out, password change, support's revoke, a session
/// evicted by the per-account cap) sends `NOTIFY` with the account id when it commits (a trigger), and each instance's
/// `PostgresListener` forgets that account's sessions when it hears it. So the cache is used only while the listener
/// is listening (it hears its own probe: `PostgresListener`'s `probeEvery`): it starts empty and unused, is emptied
/// when the listener (re)connects and dropped when it loses its connection or stops hearing. A session is trusted for
/// at most `trustMs` from the moment its read began: the bound on a revocation missed before the listener found it
/// could not hear. A read that began before a revocation was heard or made here is not kept (`ReadTicket`), so a
/// revoked session cannot come back from a read that raced it.
///
/// Only sessions found are kept (an unknown token costs a read every time, as before), at most `capacity`.
public final class SessionCache: Sendable {
    public static let defaultTrustMs: Int64 = 5_000
    public static let defaultCapacity = 50_000

    public let trustMs: Int64
    public let capacity: Int
    private let now: @Sendable () -> Int64
    private let state = NIOLockedValueBox(State())

    private struct Entry {
        var row: SessionRow
        let readAtMs: Int64
    }

    private struct State {
        var listening = false
        /// Moves on every forgetting: a read begun under an older generation is not kept.
        var generation: UInt64 = 0
        var entries: [Data: Entry] = [:]
        var byAccount: [String: Set<Data>] = [:]

        mutating func remove(_ tokenHash: Data) {
            guard let entry = entries.removeValue(forKey: tokenHash) else { return }
            byAccount[entry.row.accountId]?.remove(tokenHash)
            if byAccount[entry.row.accountId]?.isEmpty == true { byAccount[entry.row.accountId] = nil }
        }

        mutating func forget(accountId: String) {
            generation &+= 1
            for hash in byAccount.removeValue(forKey: accountId) ?? [] { entries[hash] = nil }
        }

        mutating func forgetAll() {
            generation &+= 1
            entries.removeAll()
            byAccount.removeAll()
        }
    }

    /// `now`: a monotonic clock in milliseconds (tests move it).
    public init(
        trustMs: Int64 = defaultTrustMs, capacity: Int = defaultCapacity,
        now: @escaping @Sendable () -> Int64 = { Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000) }
    ) {
        self.trustMs = trustMs
        self.capacity = capacity
        self.now = now
    }

    /// The kept row, if it is still trusted.
    public func session(_ tokenHash: Data) -> SessionRow? {
        let now = now()
        return state.withLockedValue { s in
            guard s.listening, let entry = s.entries[tokenHash] else { return nil }
            guard now - entry.readAtMs < trustMs else {
                s.remove(tokenHash)
                return nil
            }
            return entry.row
        }
    }

    /// When a read began, and under which generation.
    public struct ReadTicket: Sendable {
        let generation: UInt64
        let startedAtMs: Int64
    }

    /// Taken before reading a session from the database, handed back to `keep`: nil while nothing may be kept.
    public func ticket() -> ReadTicket? {
        let now = now()
        return state.withLockedValue { s in s.listening ? ReadTicket(generation: s.generation, startedAtMs: now) : nil }
    }

    /// Keeps a row read from the database, unless something was forgotten since its ticket was taken. A full cache
    /// first drops what is no longer trusted, and everything if that leaves it more than half full: a sweep every
    /// `capacity / 2` rows at most.
    public func keep(_ row: SessionRow, readUnder ticket: ReadTicket?) {
        guard let ticket else { return }
        let now = now()
        state.withLockedValue { s in
            guard s.listening, s.generation == ticket.generation, now - ticket.startedAtMs < trustMs else { return }
            if s.entries[row.tokenHash] == nil, s.entries.count >= capacity {
                s.entries = s.entries.filter { now - $0.value.readAtMs < trustMs }
                if s.entries.count > capacity / 2 { s.entries.removeAll() }
                s.byAccount = Dictionary(grouping: s.entries.keys) { s.entries[$0]!.row.accountId }.mapValues(Set.init)
            }
            s.entries[row.tokenHash] = Entry(row: row, readAtMs: ticket.startedAtMs)
            s.byAccount[row.accountId, default: []].insert(row.tokenHash)
        }
    }

    /// A touch this instance wrote: the kept row (if any, so a revocation already heard stays heard) slides with it.
    public func touched(_ tokenHash: Data, lastSeenAtMs: Int64, expiresAtMs: Int64) {
        state.withLockedValue { s in
            guard let entry = s.entries[tokenHash] else { return }
            let r = entry.row
            s.entries[tokenHash]!.row = SessionRow(
                tokenHash: r.tokenHash, accountId: r.accountId, username: r.username, appAccountToken: r.appAccountToken,
                deviceName: r.deviceName, createdAtMs: r.createdAtMs, lastSeenAtMs: lastSeenAtMs, expiresAtMs: expiresAtMs)
        }
    }

    /// The account's sessions were revoked (here, or elsewhere as heard).
    public func forget(accountId: String) { state.withLockedValue { $0.forget(accountId: accountId) } }

    /// A session was revoked by its token alone: its account is not known here.
    public func forget(tokenHash: Data) {
        state.withLockedValue { s in
            s.generation &+= 1
            s.remove(tokenHash)
        }
    }

    /// What the listener reports: listening (anything may have changed while nobody listened), an account's sessions
    /// revoked elsewhere, or listening no more.
    public func heard(_ event: PostgresListenerEvent) {
        state.withLockedValue { s in
            switch event {
            case .listening:
                s.forgetAll()
                s.listening = true
            case .notified(let accountId):
                s.forget(accountId: accountId)
            case .lost:
                s.forgetAll()
                s.listening = false
            }
        }
    }

    /// How many rows are kept.
    public var count: Int { state.withLockedValue { $0.entries.count } }
}
