import Foundation
import GRDB
import IAPProtocol
import JSONRPC
import RPCTestSupport
import Testing

@testable import AccountsService

/// The sign-in throttle slows guessing without handing anyone a way to lock an owner out, and keeps no counter for
/// ever. Before: five bad passwords per 15 minutes, from anywhere, kept any chosen username locked for good, and
/// every attempt (unknown usernames too) left a row that was never deleted.
@Suite struct LoginThrottleTests {
    static func login(_ f: AccountsFixture, _ username: String, _ password: String, from address: String) async -> RPCError? {
        await rpcError {
            _ = try await f.client.call(
                AccountsLogin.self,
                .init(username: username, password: password, clientAddress: address, internalToken: AccountsFixture.internalToken))
        }
    }

    @Test func guessesFromOneAddressNeverLockTheOwnerOut() async throws {
        let f = try await AccountsFixture.start()
        defer { Task { await f.stop() } }
        _ = try await f.register("ana")
        for i in 0..<20 { _ = await Self.login(f, "ana", "guess \(i)", from: "198.51.100.7") }
        #expect(await Self.login(f, "ana", "guess", from: "198.51.100.7")?.knownCode == .rateLimited, "the guesser is stopped")
        #expect(await Self.login(f, "ana", "correct horse battery", from: "203.0.113.9") == nil, "the owner signs in at once")
    }

    /// Someone holding a stolen session guesses the current password at `changePassword` no faster than a sign-in from one
    /// address guesses it: found right, it would change the password and lock the owner out. Before, only the name's
    /// global count (50 a window, then seconds of delay) applied.
    @Test func aStolenSessionGuessesTheCurrentPasswordNoFasterThanOneAddress() async throws {
        let f = try await AccountsFixture.start()
        defer { Task { await f.stop() } }
        let stolen = try await f.register("cleo", device: "stolen phone").session.token
        let policy = f.configuration.throttle
        func change(_ current: String, session: String = stolen) async -> RPCError? {
            await rpcError {
                _ = try await f.client.call(
                    AccountsChangePassword.self, .init(session: session, currentPassword: current, newPassword: "attacker owns this now"))
            }
        }
        for i in 0..<policy.usernameThreshold { #expect(await change("guess \(i)")?.reason == "invalidCredentials") }
        let limited = await change("correct horse battery")
        #expect(limited?.knownCode == .rateLimited, "even the right password waits: \(String(describing: limited))")
        #expect(limited?.data.extra["retryAfterMs"]?.intValue == policy.baseLockMs)
        // The owner is not locked out: signs in from elsewhere, and that session changes the password at once.
        let owners = try await f.login("cleo", device: "own laptop").session.token
        #expect(await change("correct horse battery", session: owners) == nil)
        #expect(await rpcError { try await f.authenticate(stolen) }?.knownCode == .unauthenticated, "the stolen session ended")
    }

    @Test func guessesSpreadOverManyAddressesOnlySlowTheName() async throws {
        let f = try await AccountsFixture.start()
        defer { Task { await f.stop() } }
        _ = try await f.register("bea")
        let policy = f.configuration.throttle
        // A patient guesser: each time the name is slowed, waits exactly as long, then guesses again from a new address.
        var longest: Int64 = 0
        for i in 0..<(policy.usernameGlobalThreshold + 20) {
            if let refused = await Self.login(f, "bea", "guess", from: "198.51.100.\(i % 250)"), refused.knownCode == .rateLimited {
                let wait = refused.data.extra["retryAfterMs"]?.intValue ?? 0
                longest = max(longest, wait)
                f.clock.advance(ms: wait)
            }
        }
        #expect(longest > 0 && longest <= policy.maxUsernameDelayMs, "slowed, never locked: the longest wait was \(longest) ms")
        let slowed = await Self.login(f, "bea", "correct horse battery", from: "203.0.113.9")
        let wait = slowed?.knownCode == .rateLimited ? (slowed?.data.extra["retryAfterMs"]?.intValue ?? .max) : 0
        #expect(wait <= policy.maxUsernameDelayMs, "a delay of seconds, not a lock: \(wait) ms")
        f.clock.advance(ms: wait)
        #expect(await Self.login(f, "bea", "correct horse battery", from: "203.0.113.9") == nil)
    }

    @Test func countersExpireWithTheirWindowAndTheTableStaysBounded() async throws {
        let f = try await AccountsFixture.start { $0.throttle.maxRows = 60 }
        defer { Task { await f.stop() } }
        // At the store: 100,000 counters (distinct usernames, written in one statement into the SQLite file), then a
        // sweep keeps the newest `maxRows`. (On PostgreSQL, through the store: 500, a round trip each.)
        let now = f.clock.nowMs
        let keys = (0..<(f.store is PostgresAccountsStore ? 500 : 100_000)).map { "user:flood-\($0)" }
        if f.store is PostgresAccountsStore {
            try await f.store.updateThrottle(keys: keys) { key, _ in
                ThrottleState(failures: 1, windowStartMs: now - Int64(key.split(separator: "-").last.map { Int($0)! % 1_000 } ?? 0), lockedUntilMs: 0)
            }
        } else {
            let file = try DatabaseQueue(path: f.directory.appendingPathComponent("accounts.sqlite").path)
            try await file.write { db in
                try db.execute(
                    sql: """
                        WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
                        INSERT INTO loginThrottle (key, failures, windowStartMs, lockedUntilMs)
                        SELECT 'user:flood-' || i, 1, ? - (i % 1000), 0 FROM n
                        """, arguments: [keys.count - 1, now])
            }
        }
        #expect(try await f.store.expireThrottle(windowEndedBeforeMs: Int64.min, nowMs: now, maxRows: keys.count / 10) == keys.count / 10)
        // Expired ones go whatever the bound: a window that began before this one and holds no lock.
        #expect(try await f.store.expireThrottle(windowEndedBeforeMs: now + 1, nowMs: now, maxRows: 1_000) == 0)

        // Through the service: failed sign-ins for distinct unknown names from distinct addresses (three counters each)
        // are swept every 64th attempt, down to maxRows, and expire with their window.
        for i in 0..<130 { _ = await Self.login(f, "nobody-\(i)", "guess", from: "192.0.2.\(i % 250)") }
        let kept = try await f.store.expireThrottle(windowEndedBeforeMs: Int64.min, nowMs: f.clock.nowMs, maxRows: .max)
        #expect(kept <= 66, "\(kept) counters after 130 attempts with maxRows 60 (swept at the 65th and 129th)")
        f.clock.advance(ms: f.configuration.throttle.windowMs + f.configuration.throttle.maxLockMs + 1)
        _ = await Self.login(f, "after", "guess", from: "192.0.2.1")
        for _ in 0..<63 { _ = await Self.login(f, "after", "guess", from: "192.0.2.2") }
        let fresh = try await f.store.expireThrottle(windowEndedBeforeMs: Int64.min, nowMs: f.clock.nowMs, maxRows: .max)
        #expect(fresh <= 6, "only this window's counters are left: \(fresh)")
    }
}
