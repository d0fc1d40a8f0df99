import AccountsService
import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import Testing

/// Accounts instances sharing one PostgreSQL database: what one instance does, every other one sees at once
/// (sessions, sign-outs, the login throttle), and nothing secret is stored in the clear there either.
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
