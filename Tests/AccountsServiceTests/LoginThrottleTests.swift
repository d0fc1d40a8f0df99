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
