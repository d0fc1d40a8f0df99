import CoreMetrics
import Dispatch
import IAPProtocol
import NIOConcurrencyHelpers

/// What this instance last wrote or read of a holder's wallet, and the account's last event sequence with it, so that a
/// spend on PostgreSQL can skip its read (one statement instead of two: `PostgresFulfillmentStore.writeOnKnownWallet`).
/// A guess is never trusted for what it says, only for what to try: the spend's writes carry it as a guard (its event
/// is written only while the account's last event is still the one remembered, else the whole call fails and nothing
/// is written), and a guess that would refuse the spend is read again. So a wrong guess costs a wasted call, never money.
///
/// Spends of one holder run one at a time on an instance (`begin` waits for the ones before it, `WriteTurns`): they never conflict with each other here, and each can go on the state the one before it left. A guess
/// that failed (another instance or writer moved the account) stops guesses for that holder for `contendedMs`; a guess
/// is used at most `ageMs` after it was made; at most `capacity` holders are remembered beyond those with spends running.
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
        /// The running spend was given the guess and has not said how it went.
        var lent = false
        var contendedUntilMs: Int64 = 0
    }

    /// How guesses went: written on (a lent guess at `end`), wrong (`wrongGuess`), not taken (`giveBack`).
    struct Outcomes: Sendable, Equatable {
        var written = 0, wrong = 0, notTaken = 0
    }

    let ageMs: Int64
    let contendedMs: Int64
    let capacity: Int
    private let now: @Sendable () -> Int64
    private let entries = NIOLockedValueBox([Holder: Entry]())
    /// Spends of a holder here, from `begin` to `end`: the one running and those waiting their turn.
    private let turns = WriteTurns<Holder>()
    private let tally = NIOLockedValueBox(Outcomes())
    var outcomes: Outcomes { tally.withLockedValue { $0 } }
    /// `iap_fulfillment_known_wallet_spends_total{outcome}`: written, wrong (a share that rises with instances writing
    /// the same accounts; also a guessed write whose connection was lost), not_taken. `outcomes` keeps the same counts
    /// for tests, which have no metrics backend.
    private let written = Counter(label: "iap_fulfillment_known_wallet_spends_total", dimensions: [("outcome", "written")])
    private let wrong = Counter(label: "iap_fulfillment_known_wallet_spends_total", dimensions: [("outcome", "wrong")])
    private let notTaken = Counter(label: "iap_fulfillment_known_wallet_spends_total", dimensions: [("outcome", "not_taken")])

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

    /// A spend of the holder begins here, once the holder's spends that began before it here have ended; every call is
    /// followed by one `end`. Answers the holder's guess, lent to this spend, when it is young enough and the holder is
    /// not benched.
    func begin(_ holder: Holder) async -> Guess? {
        await turns.begin(holder)
        let nowMs = now()
        return entries.withLockedValue { entries in
            guard var entry = entries[holder], let guess = entry.guess, entry.contendedUntilMs <= nowMs, nowMs - entry.atMs <= ageMs
            else { return nil }
            entry.lent = true
            entries[holder] = entry
            return guess
        }
    }

    /// Spends of the holder here, running or waiting (tests).
    func spends(_ holder: Holder) -> Int { turns.count(holder) }

    /// The lent guess was not used (its spend would have refused, or could not be checked): the spend reads instead.
    func giveBack(_ holder: Holder) {
        tally.withLockedValue { $0.notTaken += 1 }
        notTaken.increment()
        entries.withLockedValue { entries in entries[holder]?.lent = false }
    }

    /// The lent guess was wrong (its guarded write failed: another instance or writer moved the account): forgotten, and
    /// no guess for the holder for `contendedMs`. The spend reads instead.
    func wrongGuess(_ holder: Holder) {
        let nowMs = now()
        tally.withLockedValue { $0.wrong += 1 }
        wrong.increment()
        entries.withLockedValue { entries in
            guard var entry = entries[holder] else { return }
            entry.guess = nil
            entry.lent = false
            entry.contendedUntilMs = nowMs + contendedMs
            entries[holder] = entry
        }
    }

    /// The spend that `begin` began is done; the next of the holder's here begins. `state`: the holder's wallet and
    /// account's last event as it committed them (or read them, for an answer without a write), kept when newer than the
    /// one known (a larger sequence); nil when it failed. A guess still lent at this point was written on.
    func end(_ holder: Holder, state: Guess?) {
        let nowMs = now()
        entries.withLockedValue { entries in
            if entries[holder] == nil, entries.count >= capacity { sweep(&entries, nowMs: nowMs) }
            var entry = entries[holder] ?? Entry(guess: nil, atMs: nowMs)
            if entry.lent {
                entry.lent = false
                tally.withLockedValue { $0.written += 1 }
                written.increment()
            }
            if let state, entry.guess.map({ $0.sequence < state.sequence }) ?? true {
                entry.guess = state
                entry.atMs = nowMs
            }
            if entry.guess == nil, entry.contendedUntilMs <= nowMs {
                entries[holder] = nil  // nothing to lend or to bench
            } else {
                entries[holder] = entry
            }
        }
        turns.end(holder)  // after the state is recorded: the next spend goes on it
    }

    /// Another kind of write changed the account here (a redeem, an adjustment): its guesses are gone.
    func forget(accountId: String) {
        entries.withLockedValue { entries in
            for scope in AccountScope.allCases { entries[Holder(accountId: accountId, scope: scope)]?.guess = nil }
        }
    }

    var count: Int { entries.withLockedValue { $0.count } }

    /// Full: drops what is too old to be used, unless spending or benched; everything not spending when more than half
    /// would stay (so a sweep runs at most once per `capacity / 2` new holders).
    private func sweep(_ entries: inout [Holder: Entry], nowMs: Int64) {
        let spending = { (holder: Holder) in self.turns.count(holder) > 0 }
        entries = entries.filter { spending($0.key) || nowMs - $0.value.atMs <= ageMs || $0.value.contendedUntilMs > nowMs }
        if entries.count > capacity / 2 { entries = entries.filter { spending($0.key) } }
    }
}
