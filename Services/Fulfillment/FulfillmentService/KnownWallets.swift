import Dispatch
import IAPProtocol
import NIOConcurrencyHelpers

/// What this instance last wrote or read of a holder's wallet, and the account's last event sequence with it, so that a
/// spend on PostgreSQL can skip its read (one statement instead of two: `PostgresFulfillmentStore.writeOnKnownWallet`).
/// A guess is never trusted for what it says, only for what to try: the spend's writes carry it as a guard (its event
/// is written only while the account's last event is still the one remembered, else the whole call fails and nothing
/// is written), and a guess that would refuse the spend is read again. So a wrong guess costs a wasted call, never money.
///
/// Kept small and honest about contention: one guess per holder is lent at a time (a second concurrent spend of the
/// holder reads, as before); a guess that failed (another instance or writer moved the account) stops guesses for that
/// holder for `contendedMs`; a guess is used at most `ageMs` after it was made; at most `capacity` holders.
final class KnownWallets: Sendable {
    static let defaultAgeMs: Int64 = 60_000
    static let defaultContendedMs: Int64 = 10_000
    static let defaultCapacity = 50_000

    /// A wallet and the account's last event sequence as one committed state.
    struct Guess: Sendable, Equatable {
        var wallet: Wallet
        var sequence: Int64
    }

    private struct Entry {
        var guess: Guess?
        var atMs: Int64
        var lent = false
        var contendedUntilMs: Int64 = 0
    }

    /// How guesses went: written on (`record` of a lent guess), wrong (`contended`), not taken (`giveBack`).
    struct Outcomes: Sendable, Equatable {
        var written = 0, wrong = 0, notTaken = 0
    }

    let ageMs: Int64
    let contendedMs: Int64
    let capacity: Int
    private let now: @Sendable () -> Int64
    private let entries = NIOLockedValueBox([Holder: Entry]())
    private let tally = NIOLockedValueBox(Outcomes())
    var outcomes: Outcomes { tally.withLockedValue { $0 } }

    /// `now`: a monotonic clock in milliseconds (tests move it).
    init(
        ageMs: Int64 = defaultAgeMs, contendedMs: Int64 = defaultContendedMs, capacity: Int = defaultCapacity,
        now: @escaping @Sendable () -> Int64 = { Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000) }
    ) {
        precondition(capacity > 1, "a cache of known wallets needs room")
        self.ageMs = ageMs
        self.contendedMs = contendedMs
        self.capacity = capacity
        self.now = now
    }

    /// The holder's guess, lent to the caller until it `record`s or `drop`s it; nil when there is none young enough, it
    /// is lent already, or the holder is contended.
    func lend(_ holder: Holder) -> Guess? {
        let nowMs = now()
        return entries.withLockedValue { entries in
            guard var entry = entries[holder], let guess = entry.guess, !entry.lent, entry.contendedUntilMs <= nowMs,
                nowMs - entry.atMs <= ageMs
            else { return nil }
            entry.lent = true
            entries[holder] = entry
            return guess
        }
    }

    /// A committed state of the holder, seen by a write that succeeded (or a read that refused): kept when it is newer than
    /// the one known (a larger sequence). `returning`: the caller held the lent guess, which it gives back.
    func record(_ holder: Holder, _ guess: Guess, returning: Bool) {
        let nowMs = now()
        if returning { tally.withLockedValue { $0.written += 1 } }
        entries.withLockedValue { entries in
            var entry = entries[holder] ?? Entry(guess: nil, atMs: nowMs)
            if returning { entry.lent = false }
            if entry.guess.map({ $0.sequence < guess.sequence }) ?? true {
                entry.guess = guess
                entry.atMs = nowMs
            }
            if entries[holder] == nil, entries.count >= capacity { sweep(&entries, nowMs: nowMs) }
            entries[holder] = entry
        }
    }

    /// The lent guess was wrong (its guarded write failed): forgotten, and no guess for the holder for `contendedMs`.
    func contended(_ holder: Holder) {
        let nowMs = now()
        tally.withLockedValue { $0.wrong += 1 }
        entries.withLockedValue { entries in
            entries[holder] = Entry(guess: nil, atMs: nowMs, contendedUntilMs: nowMs + contendedMs)
        }
    }

    /// The lent guess was not used (its spend would have refused, or failed otherwise): given back unchanged.
    func giveBack(_ holder: Holder) {
        tally.withLockedValue { $0.notTaken += 1 }
        entries.withLockedValue { entries in entries[holder]?.lent = false }
    }

    /// Another kind of write changed the account here (a redeem, an adjustment): its guesses are gone.
    func forget(accountId: String) {
        entries.withLockedValue { entries in
            for scope in AccountScope.allCases { entries[Holder(accountId: accountId, scope: scope)]?.guess = nil }
        }
    }

    var count: Int { entries.withLockedValue { $0.count } }

    /// Full: drops what is too old to be used, unless lent or contended; everything not lent when more than half would
    /// stay (so a sweep runs at most once per `capacity / 2` new holders).
    private func sweep(_ entries: inout [Holder: Entry], nowMs: Int64) {
        entries = entries.filter { $0.value.lent || nowMs - $0.value.atMs <= ageMs || $0.value.contendedUntilMs > nowMs }
        if entries.count > capacity / 2 { entries = entries.filter { $0.value.lent } }
    }
}
