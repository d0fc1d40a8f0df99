import AccountsService
import Foundation
import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import PostgresSupport
import RPCTestSupport
import Testing

/// Accounts instances sharing one PostgreSQL database: what one instance does, every other one sees (sessions; sign-outs
/// at once or when its NOTIFY is heard; the login throttle), and nothing secret is stored in the clear there either.
@Suite(.enabled(if: TestPostgres.isAvailable, "PostgreSQL is not installed"))
struct PostgresAccountsTests {
    @Test func aSessionAndItsSignOutAreSeenByEveryInstance() async throws {
        let url = try await TestPostgres.newDatabase()
        let a = try await AccountsFixture.start(databaseURL: url)
        let b = try await AccountsFixture.start(databaseURL: url)
        defer {
            Task {
                await a.stop(); await b.stop()
            }
        }
        let signedIn = try await a.register("roamer", device: "iPhone")
        #expect(try await b.authenticate(signedIn.session.token).accountId == signedIn.accountId)
        let other = try await b.login("roamer", device: "iPad")
        let listed = try await a.client.call(AccountsListSessions.self, .init(session: other.session.token))
        #expect(listed.sessions.compactMap(\.deviceName).sorted() == ["iPad", "iPhone"])

        _ = try await b.client.call(AccountsLogout.self, .init(session: signedIn.session.token))
        #expect(await rpcError { try await a.authenticate(signedIn.session.token) }?.knownCode == .unauthenticated)
        #expect(try await a.authenticate(other.session.token).accountId == signedIn.accountId)
    }

    /// An instance answers a session it read lately from memory (no round trip), and forgets it when any instance
    /// revokes it: at once on the instance that revoked, and on the others when they hear the revocation's NOTIFY.
    /// The cache here trusts a row for ten minutes, so only the NOTIFY can end it during the test.
    @Test(.timeLimit(.minutes(1))) func aKeptSessionEndsOnEveryInstanceWhenAnyRevokesIt() async throws {
        let url = try await TestPostgres.newDatabase()
        let a = try await AccountsFixture.start(databaseURL: url, sessionTrustMs: 600_000)
        let b = try await AccountsFixture.start(databaseURL: url, sessionTrustMs: 600_000)
        defer {
            Task {
                await a.stop(); await b.stop()
            }
        }
        var heardOnB = b.heard.makeAsyncIterator()
        #expect(await heardOnB.next() == .listening)
        let storeB = try #require(b.store as? PostgresAccountsStore)
        let phone = try await a.register("kept", device: "iPhone")
        let tablet = try await a.login("kept", device: "iPad")
        let laptop = try await a.login("kept", device: "Mac")
        for signedIn in [phone, tablet, laptop] { _ = try await b.authenticate(signedIn.session.token) }  // read and kept
        let before = storeB.pool.roundTrips
        #expect(try await b.authenticate(phone.session.token).accountId == phone.accountId)
        #expect(storeB.pool.roundTrips == before, "a kept session took a round trip")

        // Signed out on a: b hears it and refuses.
        _ = try await a.client.call(AccountsLogout.self, .init(session: phone.session.token))
        #expect(await heardOnB.next() == .notified(phone.accountId))
        #expect(await rpcError { try await b.authenticate(phone.session.token) }?.knownCode == .unauthenticated)
        #expect(try await b.authenticate(tablet.session.token).accountId == phone.accountId)

        // Signed out on b itself: refused there at once, nothing to wait for.
        _ = try await b.client.call(AccountsLogout.self, .init(session: tablet.session.token))
        #expect(await rpcError { try await b.authenticate(tablet.session.token) }?.knownCode == .unauthenticated)
        #expect(await heardOnB.next() == .notified(phone.accountId))

        // Support signs the customer out everywhere through a: b refuses the last one.
        #expect(try await b.authenticate(laptop.session.token).accountId == phone.accountId)
        let ended = try await a.client.call(
            AccountsRevokeSessions.self, .init(accountId: phone.accountId, internalToken: AccountsFixture.internalToken))
        #expect(ended.ended == 1)
        #expect(await heardOnB.next() == .notified(phone.accountId))
        #expect(await rpcError { try await b.authenticate(laptop.session.token) }?.knownCode == .unauthenticated)
    }

    /// A password change and a sign-in past the per-account cap end sessions too: every instance hears it.
    @Test(.timeLimit(.minutes(1))) func aPasswordChangeAndTheSessionCapReachEveryInstance() async throws {
        let url = try await TestPostgres.newDatabase()
        let a = try await AccountsFixture.start(databaseURL: url, sessionTrustMs: 600_000) { $0.maxSessionsPerAccount = 2 }
        let b = try await AccountsFixture.start(databaseURL: url, sessionTrustMs: 600_000) { $0.maxSessionsPerAccount = 2 }
        defer {
            Task {
                await a.stop(); await b.stop()
            }
        }
        var heardOnB = b.heard.makeAsyncIterator()
        #expect(await heardOnB.next() == .listening)
        let first = try await a.register("capped", device: "1")
        a.clock.advance(ms: 1_000)  // the cap ends the oldest: no two made in the same millisecond
        let second = try await a.login("capped", device: "2")
        for signedIn in [first, second] { _ = try await b.authenticate(signedIn.session.token) }
        a.clock.advance(ms: 1_000)
        let third = try await a.login("capped", device: "3")  // ends the oldest, kept on b
        #expect(await heardOnB.next() == .notified(first.accountId))
        #expect(await rpcError { try await b.authenticate(first.session.token) }?.knownCode == .unauthenticated)

        _ = try await b.authenticate(second.session.token)  // kept again
        try await a.client.call(
            AccountsChangePassword.self,
            .init(session: third.session.token, currentPassword: "correct horse battery", newPassword: "a much better passphrase 2026"))
        #expect(await heardOnB.next() == .notified(first.accountId))
        #expect(await rpcError { try await b.authenticate(second.session.token) }?.knownCode == .unauthenticated)
        #expect(try await b.authenticate(third.session.token).accountId == first.accountId)
    }

    /// The instance that revokes forgets before it answers, without waiting for any NOTIFY: here nothing is heard at
    /// all (no listener; the cache is told by hand that it listens).
    @Test func theInstanceThatRevokesForgetsBeforeItAnswers() async throws {
        let f = try await AccountsFixture.start(
            databaseURL: try await TestPostgres.newDatabase(), sessionTrustMs: 600_000, listening: false
        ) { $0.maxSessionsPerAccount = 3 }
        defer { Task { await f.stop() } }
        let store = try #require(f.store as? PostgresAccountsStore)
        store.sessions.heard(.listening)
        let phone = try await f.register("alone", device: "phone")
        let tablet = try await f.login("alone", device: "tablet")
        let laptop = try await f.login("alone", device: "laptop")
        for signedIn in [phone, tablet, laptop] { _ = try await f.authenticate(signedIn.session.token) }
        #expect(store.sessions.count == 3)

        _ = try await f.client.call(AccountsLogout.self, .init(session: phone.session.token))
        #expect(await rpcError { try await f.authenticate(phone.session.token) }?.knownCode == .unauthenticated)

        try await f.client.call(
            AccountsChangePassword.self,
            .init(session: tablet.session.token, currentPassword: "correct horse battery", newPassword: "a much better passphrase 2026"))
        #expect(await rpcError { try await f.authenticate(laptop.session.token) }?.knownCode == .unauthenticated)

        _ = try await f.authenticate(tablet.session.token)
        let ended = try await f.client.call(
            AccountsRevokeSessions.self, .init(accountId: phone.accountId, internalToken: AccountsFixture.internalToken))
        #expect(ended.ended == 1)
        #expect(await rpcError { try await f.authenticate(tablet.session.token) }?.knownCode == .unauthenticated)

        let kept = try await f.login("alone", "a much better passphrase 2026", device: "1")
        _ = try await f.authenticate(kept.session.token)
        for device in ["2", "3", "4"] {  // past the cap of 3: ends the oldest, "1"
            f.clock.advance(ms: 1_000)
            _ = try await f.login("alone", "a much better passphrase 2026", device: device)
        }
        #expect(await rpcError { try await f.authenticate(kept.session.token) }?.knownCode == .unauthenticated)
    }

    /// A kept session whose revocation went unheard (here: no listener, a DELETE by hand) answers within its trust,
    /// and is refused at its touch, which finds no row.
    @Test func aKeptSessionThatMissedItsRevocationIsRefusedAtItsTouch() async throws {
        let url = try await TestPostgres.newDatabase()
        let f = try await AccountsFixture.start(databaseURL: url, sessionTrustMs: 600_000, listening: false)
        defer { Task { await f.stop() } }
        let store = try #require(f.store as? PostgresAccountsStore)
        store.sessions.heard(.listening)
        let signedIn = try await f.register("missed")
        _ = try await f.authenticate(signedIn.session.token)
        #expect(try await TestPostgres.psql(url, "WITH d AS (DELETE FROM accounts.session RETURNING 1) SELECT count(*) FROM d") == "1")
        #expect(try await f.authenticate(signedIn.session.token).accountId == signedIn.accountId)
        f.clock.advance(ms: f.configuration.sessionTouchIntervalMs)
        #expect(await rpcError { try await f.authenticate(signedIn.session.token) }?.knownCode == .unauthenticated)
    }

    /// The cache is used only while its listener listens: with the listener's connection cut, a revocation could go
    /// unheard, so nothing kept is answered until it listens again (from an empty cache).
    @Test(.timeLimit(.minutes(1))) func withoutItsListenerAnInstanceKeepsNoSession() async throws {
        let url = try await TestPostgres.newDatabase()
        let f = try await AccountsFixture.start(databaseURL: url, sessionTrustMs: 600_000)
        defer { Task { await f.stop() } }
        var heard = f.heard.makeAsyncIterator()
        #expect(await heard.next() == .listening)
        let store = try #require(f.store as? PostgresAccountsStore)
        let signedIn = try await f.register("unheard")
        _ = try await f.authenticate(signedIn.session.token)
        #expect(store.sessions.count == 1)
        let killed = try await TestPostgres.psql(
            url, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE 'LISTEN%' AND datname = current_database()")
        #expect(killed == "1")
        #expect(await heard.next() == .lost)
        #expect(store.sessions.count == 0)
        #expect(store.sessions.ticket() == nil, "a session would be kept while nobody listens")
        #expect(await heard.next() == .listening)
        let before = store.pool.roundTrips
        _ = try await f.authenticate(signedIn.session.token)
        #expect(store.pool.roundTrips == before + 1, "read again after the gap")
    }

    /// The listener checks that it hears: its own NOTIFY, every period. One whose probes do not come back (here sent to
    /// another channel; in production a connection that died without a word, or a pooler in transaction mode) is
    /// dropped and opened again, and is never taken for listening, so the session cache keeps nothing meanwhile.
    @Test(.timeLimit(.minutes(1))) func aListenerThatCannotHearItselfIsNotListening() async throws {
        let url = try await TestPostgres.newDatabase()
        let f = try await AccountsFixture.start(databaseURL: url, listening: false)
        defer { Task { await f.stop() } }
        let store = try #require(f.store as? PostgresAccountsStore)
        let events = NIOLockedValueBox<[PostgresListenerEvent]>([])
        let listener = try PostgresListener(
            pool: store.pool, channel: PostgresAccountsStore.revocationsChannel, probeEvery: .seconds(1)
        ) { event in
            store.sessions.heard(event)
            events.withLockedValue { $0.append(event) }
        }
        let running = Task { try await listener.run() }
        defer {
            listener.stop()
            running.cancel()
        }
        func eventually(_ what: String, _ check: () async throws -> Bool) async throws {
            for _ in 0..<1_000 where try await !check() { try await Task.sleep(for: .milliseconds(20)) }
            #expect(try await check(), "\(what)")
        }
        try await eventually("heard its first probe") { events.withLockedValue { $0 } == [.listening] }
        #expect(store.sessions.ticket() != nil)
        #expect(listener.connectionsListened.withLockedValue { $0 } == 1)

        listener.probeChannel.withLockedValue { $0 = "nobody_listens_here" }
        try await eventually("dropped") { events.withLockedValue { $0 } == [.listening, .lost] }
        #expect(store.sessions.ticket() == nil)
        // Two connections after it, each deaf: the first of them was dropped for a probe unheard, never listening.
        try await eventually("opened again twice") { listener.connectionsListened.withLockedValue { $0 } >= 3 }
        #expect(events.withLockedValue { $0 } == [.listening, .lost])
        #expect(store.sessions.ticket() == nil)

        listener.probeChannel.withLockedValue { $0 = nil }
        try await eventually("listening again") { events.withLockedValue { $0 }.last == .listening }
    }

    @Test func failedSignInsCountOnEveryInstance() async throws {
        let url = try await TestPostgres.newDatabase()
        let a = try await AccountsFixture.start(databaseURL: url)
        let b = try await AccountsFixture.start(databaseURL: url)
        defer {
            Task {
                await a.stop(); await b.stop()
            }
        }
        _ = try await a.register("victim")
        let threshold = a.configuration.throttle.usernameThreshold
        // Guesses alternate between the instances: together they reach the limit.
        for i in 0..<threshold {
            let instance = i.isMultiple(of: 2) ? a : b
            #expect(await rpcError { try await instance.login("victim", "guess \(i)") }?.reason == "invalidCredentials")
        }
        for instance in [a, b] {
            let refused = await rpcError { try await instance.login("victim") }
            #expect(refused?.knownCode == .rateLimited, "the right password is refused while locked, on either instance")
        }
    }

    /// A failed sign-in's throttle bookkeeping is a few statements however many keys it counts against (name, name and
    /// address, address): the refusal check is one read, and under the keys' locks (one statement takes them all) one
    /// read and one write. Every round trip made holding those locks is one that every other attempt on the same name or
    /// address queues behind (64 at once timed out on a loaded machine when it was 20 statements).
    @Test func aFailedSignInIsAFewStatements() async throws {
        let f = try await AccountsFixture.start(databaseURL: try await TestPostgres.newDatabase())
        defer { Task { await f.stop() } }
        _ = try await f.register("counted")
        let pool = try #require((f.store as? PostgresAccountsStore)?.pool)
        _ = await rpcError { try await f.login("counted", "guess 0") }
        let before = pool.roundTrips
        #expect(await rpcError { try await f.login("counted", "guess 1") }?.reason == "invalidCredentials")
        let statements = pool.roundTrips - before
        // The refusal check 1; lock 1, BEGIN, read 1, write 1, COMMIT, unlock; the account's read.
        #expect(statements <= Self.statementsPerFailedSignIn, "a failed sign-in took \(statements) statements")
    }

    static let statementsPerFailedSignIn = 8

    @Test func oneUsernameRegisteredOnTwoInstancesAtOnceIsTakenOnce() async throws {
        let url = try await TestPostgres.newDatabase()
        let a = try await AccountsFixture.start(databaseURL: url)
        let b = try await AccountsFixture.start(databaseURL: url)
        defer {
            Task {
                await a.stop(); await b.stop()
            }
        }
        let outcomes = await withTaskGroup(of: String.self) { group in
            for i in 0..<16 {
                group.addTask {
                    do {
                        _ = try await (i.isMultiple(of: 2) ? a : b).register("Popular")
                        return "created"
                    } catch let error as RPCError {
                        return error.reason ?? "\(error.code)"
                    } catch {
                        return "\(error)"
                    }
                }
            }
            var all: [String] = []
            for await outcome in group { all.append(outcome) }
            return all
        }
        #expect(outcomes.filter { $0 == "created" }.count == 1)
        #expect(outcomes.filter { $0 == "usernameTaken" }.count == 15, "\(outcomes)")
    }

    /// Many customers registering, then signing in again, at once on two instances of a fresh database: none runs again,
    /// none fails. (Until 2026-11-30 these ran SERIALIZABLE, and on a fresh database every new account's and session's
    /// rows share a few index pages, whose predicate locks made unrelated sign-ins abort each other: 19-37 of 64 ran
    /// again here, and a benchmark's 32 registrations once answered `storageUnavailable`.)
    @Test func registrationsAndSignInsOfManyAccountsAtOnceAreEachAnsweredTheFirstTime() async throws {
        let url = try await TestPostgres.newDatabase()
        let unthrottled: (inout AccountsConfiguration) -> Void = { $0.throttle.addressThreshold = 1_000_000 }  // all from 127.0.0.1
        let a = try await AccountsFixture.start(databaseURL: url, configure: unthrottled)
        let b = try await AccountsFixture.start(databaseURL: url, configure: unthrottled)
        defer {
            Task {
                await a.stop(); await b.stop()
            }
        }
        for step in ["register", "login"] {
            let failures = await withTaskGroup(of: String?.self) { group in
                for i in 0..<64 {
                    group.addTask {
                        let instance = i.isMultiple(of: 2) ? a : b
                        do {
                            _ = try await step == "register" ? instance.register("crowd\(i)") : instance.login("crowd\(i)")
                            return nil
                        } catch let error as RPCError {
                            return error.reason ?? "\(error.code)"
                        } catch {
                            return "\(error)"
                        }
                    }
                }
                var all: [String] = []
                for await failure in group { if let failure { all.append(failure) } }
                return all
            }
            #expect(failures.isEmpty, "\(step): \(failures)")
            let retries = [a, b].compactMap { ($0.store as? PostgresAccountsStore)?.pool.retries }.reduce(0, +)
            #expect(retries == 0, "\(step): \(retries) ran again")
        }
    }

    /// Sign-ins of one account at once on two instances take turns on the account's lock: each succeeds the first time,
    /// and the cap holds exactly (the newest three sessions stay).
    @Test func signInsOfOneAccountAtOnceKeepItsSessionCapExactly() async throws {
        let url = try await TestPostgres.newDatabase()
        let capped: (inout AccountsConfiguration) -> Void = {
            $0.throttle.addressThreshold = 1_000_000
            $0.throttle.usernameThreshold = 1_000_000
            $0.throttle.usernameGlobalThreshold = 1_000_000
            $0.maxSessionsPerAccount = 3
        }
        let a = try await AccountsFixture.start(databaseURL: url, configure: capped)
        let b = try await AccountsFixture.start(databaseURL: url, configure: capped)
        defer {
            Task {
                await a.stop(); await b.stop()
            }
        }
        _ = try await a.register("solo")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<24 { group.addTask { _ = try await (i.isMultiple(of: 2) ? a : b).login("solo") } }
            try await group.waitForAll()
        }
        let psql = url.replacingOccurrences(of: "postgres://", with: "postgresql://")
        #expect(try await TestPostgres.psql(psql, "SELECT count(*) FROM accounts.session") == "3")
        let retries = [a, b].compactMap { ($0.store as? PostgresAccountsStore)?.pool.retries }.reduce(0, +)
        #expect(retries == 0, "\(retries) ran again")
    }

    @Test func passwordsAndTokensAreNotStoredInTheClear() async throws {
        let url = try await TestPostgres.newDatabase()
        let a = try await AccountsFixture.start(databaseURL: url)
        defer { Task { await a.stop() } }
        let password = "plaintext canary passphrase"
        let first = try await a.register("Canary", password, device: "iPhone")
        let second = try await a.login("canary", password, device: "iPad")
        let dump = try await TestPostgres.dump(url)
        #expect(dump.contains("Canary") && dump.contains("iPad"), "the dump holds the accounts' rows")
        #expect(!dump.contains(password))
        for token in [first.session.token, second.session.token] { #expect(!dump.contains(token)) }
        #expect(dump.contains("scrypt$"), "the password is kept as a scrypt hash")
    }
}
