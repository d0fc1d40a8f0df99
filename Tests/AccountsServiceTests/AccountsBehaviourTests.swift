import AccountsService
import Foundation
import GRDB
import IAPProtocol
import JSONRPC
import RPCTestSupport
import Testing

@Suite struct AccountsBehaviourTests {
    @Test(.disabled(if: TestPostgres.suiteUsesPostgres, "reads the SQLite file; PostgresAccountsTests covers PostgreSQL"))
    func tokensAndPasswordsAreNeverStoredInPlaintext() async throws {
        let f = try await AccountsFixture.start()
        defer { Task { await f.stop() } }
        let password = "plaintext canary passphrase"
        let first = try await f.register("Canary", password, device: "iPhone")
        let second = try await f.login("canary", password, device: "iPad")
        #expect(try await f.authenticate(second.session.token).accountId == first.accountId)

        // Read every value of every table straight from the file.
        let db = try DatabaseQueue(path: f.databasePath)
        let stored: [Data] = try await db.read { db in
            var values: [Data] = []
            for table in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'") {
                for row in try Row.fetchAll(db, sql: "SELECT * FROM \"\(table)\"") {
                    for (_, value) in row {
                        switch value.storage {
                        case .string(let s): values.append(Data(s.utf8))
                        case .blob(let b): values.append(b)
                        default: continue
                        }
                    }
                }
            }
            return values
        }
        #expect(!stored.isEmpty)
        for token in [first.session.token, second.session.token] {
            let rawToken = Data(base64Encoded: token.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/") + "=")!
            #expect(rawToken.count == 32)  // 256 random bits
            for value in stored {
                #expect(value.range(of: Data(token.utf8)) == nil)
                #expect(value.range(of: rawToken) == nil)
            }
        }
        for value in stored { #expect(value.range(of: Data(password.utf8)) == nil) }
        // What is stored instead: SHA-256 of the token, scrypt of the password with its parameters.
        let sessionHashes = try await db.read { try Data.fetchAll($0, sql: "SELECT tokenHash FROM session") }
        #expect(Set(sessionHashes) == Set([first, second].map { SessionTokens.hash($0.session.token)! }))
        let hash = try await db.read { try String.fetchOne($0, sql: "SELECT passwordHash FROM account") }
        #expect(hash?.hasPrefix("scrypt$ln=10,r=8,p=1$") == true)
    }

    /// Accounts are acknowledged only once on disk: fulfillment binds purchases to their appAccountToken durably.
    @Test(.disabled(if: TestPostgres.suiteUsesPostgres, "the SQLite file's own setting"))
    func accountsWriteWithSynchronousFull() async throws {
        let f = try await AccountsFixture.start()
        defer { Task { await f.stop() } }
        #expect(try await #require(f.store as? AccountsStore).synchronousMode() == 2)
    }

    @Test func sessionsExpireAndSlideWithUse() async throws {
        let f = try await AccountsFixture.start()
        defer { Task { await f.stop() } }
        let lifetime = f.configuration.sessionLifetimeMs
        let token = try await f.register("slider").session.token
        let initial = try await f.authenticate(token).expiresAtMs
        #expect(initial == f.clock.nowMs + lifetime)
        // Used after 20 days: expiry moves to 30 days from then.
        f.clock.advance(ms: lifetime * 2 / 3)
        let slid = try await f.authenticate(token).expiresAtMs
        #expect(slid == f.clock.nowMs + lifetime)
        // Past the original expiry, still valid thanks to the use.
        f.clock.advance(ms: lifetime / 2)
        #expect(try await f.authenticate(token).accountId.isEmpty == false)
        // Unused for the whole lifetime: expired.
        f.clock.advance(ms: lifetime + 1)
        let error = await rpcError { try await f.authenticate(token) }
        #expect(error?.knownCode == .unauthenticated)
        #expect(error?.reason == "sessionExpired")
        #expect(await rpcError { try await f.client.call(AccountsListSessions.self, .init(session: token)) }?.knownCode == .unauthenticated)
    }

    /// `authenticate` on the event loop (SQLite: its own connection; PostgreSQL: the session cache, while its
    /// listener listens; no write): the same account as the blocking pool's answer, nothing inline when the session is
    /// due its touch (the pool writes that), and every commit (a logout) seen at once.
    @Test func theEventLoopReaderSeesEveryCommitAndLeavesTouchesToThePool() async throws {
        let f = try await AccountsFixture.start()
        defer { Task { await f.stop() } }
        var heard = f.heard.makeAsyncIterator()
        if TestPostgres.suiteUsesPostgres { #expect(await heard.next() == .listening) }
        let token = try await f.register("inline").session.token
        let viaPool = try await f.authenticate(token)
        #expect(try f.service.authenticateWithoutWaiting(token) == viaPool)
        f.clock.advance(ms: f.configuration.sessionTouchIntervalMs)
        #expect(try f.service.authenticateWithoutWaiting(token) == nil)
        let touched = try await f.authenticate(token)
        #expect(touched.expiresAtMs == f.clock.nowMs + f.configuration.sessionLifetimeMs)
        #expect(try f.service.authenticateWithoutWaiting(token) == touched)
        _ = try await f.client.call(AccountsLogout.self, .init(session: token))
        if TestPostgres.suiteUsesPostgres {
            // Forgotten on sign-out: not answered inline; the pool's read refuses it.
            #expect(try f.service.authenticateWithoutWaiting(token) == nil)
            #expect(await rpcError { try await f.authenticate(token) }?.knownCode == .unauthenticated)
        } else {
            #expect(throws: RPCError.self) { try f.service.authenticateWithoutWaiting(token) }
        }
        #expect(throws: RPCError.self) { try f.service.authenticateWithoutWaiting("not-a-token") }
    }

    @Test func revokedSessionsFail() async throws {
        let f = try await AccountsFixture.start()
        defer { Task { await f.stop() } }
        let token = try await f.register("revoker").session.token
        _ = try await f.client.call(AccountsLogout.self, .init(session: token))
        #expect(await rpcError { try await f.authenticate(token) }?.knownCode == .unauthenticated)
    }

    @Test func changingThePasswordRevokesEveryOtherSession() async throws {
        let f = try await AccountsFixture.start()
        defer { Task { await f.stop() } }
        let here = try await f.register("changer", device: "phone").session.token
        let others = [
            try await f.login("changer", device: "tablet").session.token,
            try await f.login("changer", device: "laptop").session.token,
        ]
        _ = try await f.client.call(
            AccountsChangePassword.self,
            .init(
                session: here, currentPassword: "correct horse battery",
                newPassword: "fresh new passphrase"))
        for token in others { #expect(await rpcError { try await f.authenticate(token) }?.knownCode == .unauthenticated) }
        #expect(try await f.client.call(AccountsListSessions.self, .init(session: here)).sessions.map(\.deviceName) == ["phone"])
        #expect(await rpcError { try await f.login("changer") }?.reason == "invalidCredentials")
        _ = try await f.login("changer", "fresh new passphrase")
    }

    @Test func usernamesCollideCaseInsensitivelyAndAfterNFKC() async throws {
        let f = try await AccountsFixture.start()
        defer { Task { await f.stop() } }
        let alice = try await f.register("Alice")
        for variant in ["alice", "ALICE", "Ａｌｉｃｅ", "ａｌｉｃｅ"] {
            #expect(await rpcError { try await f.register(variant) }?.reason == "usernameTaken", "\(variant)")
            #expect(try await f.login(variant).accountId == alice.accountId, "\(variant)")
        }
    }

    @Test func concurrentRegistrationsOfOneNameCreateOneAccount() async throws {
        let f = try await AccountsFixture.start()
        defer { Task { await f.stop() } }
        let outcomes = await withTaskGroup(of: Bool.self) { group in
            for i in 0..<12 {
                group.addTask { (try? await f.register(i % 2 == 0 ? "Racer" : "racer")) != nil }
            }
            var wins = 0
            for await won in group where won { wins += 1 }
            return wins
        }
        #expect(outcomes == 1)
    }

    @Test func theRateLimitEngagesAndReleases() async throws {
        let f = try await AccountsFixture.start()
        defer { Task { await f.stop() } }
        _ = try await f.register("target")
        for i in 0..<f.configuration.throttle.usernameThreshold {
            #expect(await rpcError { try await f.login("target", "wrong \(i)") }?.reason == "invalidCredentials")
        }
        // Engaged: even the right password is refused, with a wait.
        let limited = await rpcError { try await f.login("target") }
        #expect(limited?.knownCode == .rateLimited)
        #expect(limited?.retryable == true)
        let wait = limited?.data.extra["retryAfterMs"]?.intValue ?? 0
        #expect(wait == f.configuration.throttle.baseLockMs)
        // Another failure after the lock doubles it.
        f.clock.advance(ms: wait)
        _ = await rpcError { try await f.login("target", "wrong again") }
        #expect(await rpcError { try await f.login("target") }?.data.extra["retryAfterMs"]?.intValue == 2 * wait)
        // Released once the wait has passed; success clears the count.
        f.clock.advance(ms: 2 * wait)
        _ = try await f.login("target")
        #expect(await rpcError { try await f.login("target", "one more wrong") }?.reason == "invalidCredentials")
    }

    @Test func lockoutsAreCappedSoAUserIsNeverLockedOutForGood() async throws {
        let f = try await AccountsFixture.start { $0.throttle.addressThreshold = 1_000 }
        defer { Task { await f.stop() } }
        _ = try await f.register("besieged")
        // An attacker keeps failing, each time as soon as the lock allows.
        for _ in 0..<40 {
            if let e = await rpcError({ try await f.login("besieged", "guess") }), let wait = e.data.extra["retryAfterMs"]?.intValue {
                #expect(wait <= f.configuration.throttle.maxLockMs)
                f.clock.advance(ms: wait)
            }
        }
        f.clock.advance(ms: f.configuration.throttle.maxLockMs)
        _ = try await f.login("besieged")
    }

    @Test func failuresFromOneAddressAcrossUsernamesAreLimited() async throws {
        let f = try await AccountsFixture.start { $0.throttle.addressThreshold = 3 }
        defer { Task { await f.stop() } }
        for name in ["spray-a", "spray-b", "spray-c"] {
            #expect(await rpcError { try await f.login(name, "guess") }?.reason == "invalidCredentials")
        }
        #expect(await rpcError { try await f.login("spray-d", "guess") }?.knownCode == .rateLimited)
    }

    @Test func unknownUsersAndWrongPasswordsLookTheSame() async throws {
        let f = try await AccountsFixture.start()
        defer { Task { await f.stop() } }
        _ = try await f.register("known")
        let wrong = await rpcError { try await f.login("known", "wrong password") }
        let unknown = await rpcError { try await f.login("unknown", "wrong password") }
        #expect(wrong != nil)
        #expect(wrong == unknown)
    }

    @Test(.disabled(if: TestPostgres.suiteUsesPostgres, "reads the SQLite file; PostgresAccountsTests covers PostgreSQL"))
    func olderHashesAreUpgradedOnLogin() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("accounts-\(UUID().uuidString)")
        let old = try await AccountsFixture.start(directory: dir)
        _ = try await old.register("upgrader")
        await old.stop()
        let raised = try await AccountsFixture.start(directory: dir) { $0.passwordHashing.logN = 11 }
        defer { Task { await raised.stop() } }
        func storedHash() async throws -> String? {
            try await DatabaseQueue(path: raised.databasePath).read { try String.fetchOne($0, sql: "SELECT passwordHash FROM account") }
        }
        #expect(try await storedHash()?.hasPrefix("scrypt$ln=10,") == true)
        _ = try await raised.login("upgrader")
        #expect(try await storedHash()?.hasPrefix("scrypt$ln=11,") == true)
        _ = try await raised.login("upgrader")  // and the upgraded hash verifies
    }

    @Test func internalMethodsRefuseWithoutTheInternalToken() async throws {
        let f = try await AccountsFixture.start { $0.internalToken = nil }
        defer { Task { await f.stop() } }
        let account = try await f.register("internal-check")
        let error = await rpcError {
            try await f.client.call(AccountsFindByAppAccountToken.self, .init(appAccountToken: account.appAccountToken, internalToken: ""))
        }
        #expect(error?.knownCode == .forbidden)
    }
}
