import AccountsService
import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import Testing

/// Guessing and flooding (docs/security.md): attempts are counted before the slow hash, so neither
/// a batch nor many connections can race the limit; the hasher's queue is bounded; registrations are
/// limited per address; sessions have an absolute lifetime and a per-account cap. Password checks are
/// counted by the hasher itself (`passwordDerivations`), not inferred from answers.
@Suite struct AbuseLimitTests {
    static func loginLine(_ id: Int, _ username: String, _ password: String) -> String {
        #"{"jsonrpc":"2.0","method":"accounts.login","id":\#(id),"params":{"username":"\#(username)","password":"\#(password)"}}"#
    }

    @Test func aBatchOf256LoginsGetsNoMoreGuessesThanTheLimit() async throws {
        let f = try await AccountsFixture.start()
        defer { Task { await f.stop() } }
        _ = try await f.register("victim")
        let before = f.service.passwordDerivations
        let client = try await LineClient.connect(port: f.port)
        let batch = "[" + (0..<256).map { Self.loginLine($0, "victim", "guess \($0)") }.joined(separator: ",") + "]"
        try await client.send(line: batch)
        guard case .line(let reply) = try await client.next() else { Issue.record("no reply to the batch"); return }
        await client.close()
        let answers = try #require(try JSONSerialization.jsonObject(with: Data(reply.utf8)) as? [[String: Any]])
        #expect(answers.count == 256)
        let codes = answers.compactMap { ($0["error"] as? [String: Any])?["code"] as? Int }
        #expect(codes.count == 256, "every guess failed")
        let checked = f.service.passwordDerivations - before
        #expect(checked <= f.configuration.throttle.usernameThreshold, "\(checked) passwords were checked")
        #expect(
            codes.filter { $0 == RPCErrorCode.rateLimited.rawValue }.count >= 256 - f.configuration.throttle.usernameThreshold,
            "\(Dictionary(grouping: codes, by: { $0 }).mapValues(\.count))")
    }

    @Test func sixtyFourConnectionsAtOnceGetNoMoreGuessesThanTheLimit() async throws {
        let f = try await AccountsFixture.start()
        defer { Task { await f.stop() } }
        _ = try await f.register("victim")
        let before = f.service.passwordDerivations
        var clients: [LineClient] = []
        for _ in 0..<64 { clients.append(try await LineClient.connect(port: f.port)) }
        // Every connection sends its guess before any answer is read.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (i, client) in clients.enumerated() {
                group.addTask { try await client.send(line: Self.loginLine(i, "victim", "guess \(i)")) }
            }
            try await group.waitForAll()
        }
        var limited = 0
        var others: [String: Int] = [:]  // what the rest answered, for the failure message
        for client in clients {
            if case .line(let reply) = try await client.next() {
                if reply.contains("\"code\":\(RPCErrorCode.rateLimited.rawValue)") {
                    limited += 1
                } else {
                    let code = reply.range(of: #""code":-?[0-9]+"#, options: .regularExpression).map { String(reply[$0]) } ?? "no code"
                    others[code, default: 0] += 1
                }
            }
            await client.close()
        }
        let checked = f.service.passwordDerivations - before
        #expect(checked <= f.configuration.throttle.usernameThreshold, "\(checked) passwords were checked")
        #expect(limited >= 64 - f.configuration.throttle.usernameThreshold, "the others answered \(others)")
    }

    @Test func theHashersQueueIsBoundedAndAnswersRateLimitedWhenFull() async throws {
        // One thread, room for two: a burst of sign-ups (each a slow hash) cannot queue without bound.
        let hasher = PasswordHasher(parameters: ScryptParameters(logN: 16, r: 8, p: 1), concurrency: 1, maxPending: 2)
        let outcomes = await withTaskGroup(of: Bool.self) { group in
            for i in 0..<16 { group.addTask { (try? await hasher.hash("password \(i)")) != nil } }
            var done: [Bool] = []
            for await ok in group { done.append(ok) }
            return done
        }
        await hasher.shutdown()
        #expect(outcomes.contains(false), "some hashes were refused while the queue was full")
        #expect(hasher.derivations == outcomes.filter { $0 }.count, "refused requests ran no scrypt")

        // Through the service: a full queue is `rateLimited` (retryable), not an internal error or a hang.
        let f = try await AccountsFixture.start {
            $0.passwordHashing = ScryptParameters(logN: 16, r: 8, p: 1)
            $0.hashingConcurrency = 1
            $0.hashingQueueLimit = 1
        }
        defer { Task { await f.stop() } }
        let client = try await LineClient.connect(port: f.port)
        let batch = (0..<8).map {
            #"{"jsonrpc":"2.0","method":"accounts.register","id":\#($0),"params":{"username":"burst\#($0)","password":"long enough password \#($0)"}}"#
        }
        try await client.send(line: "[" + batch.joined(separator: ",") + "]")
        guard case .line(let reply) = try await client.next() else { Issue.record("no reply"); return }
        await client.close()
        #expect(reply.contains("\"code\":\(RPCErrorCode.rateLimited.rawValue)"), "\(reply.prefix(300))")
        #expect(!reply.contains("\"code\":\(RPCErrorCode.internalError.rawValue)"))
    }

    @Test func registrationsAreLimitedPerClientAddress() async throws {
        let f = try await AccountsFixture.start { $0.throttle.registrationThreshold = 3 }
        defer { Task { await f.stop() } }
        for i in 0..<3 { _ = try await f.register("new-\(i)") }
        let refused = await rpcError {
            _ = try await f.client.call(AccountsRegister.self, .init(username: "new-3", password: "correct horse battery"))
        }
        #expect(refused?.knownCode == .rateLimited)
        #expect(refused?.data.extra["retryAfterMs"]?.intValue ?? 0 > 0)
        // Nothing was created by the refused call, and sign-in of existing accounts is unaffected.
        #expect(await rpcError { try await f.login("new-3") }?.reason == "invalidCredentials")
        _ = try await f.login("new-0")
    }

    /// One host is given a whole IPv6 /64: keyed on each address, it would register (and guess) without limit.
    @Test func anIPv6NetworkCountsAsOneAddress() async throws {
        let f = try await AccountsFixture.start { $0.throttle.registrationThreshold = 3 }
        defer { Task { await f.stop() } }
        func register(_ name: String, from address: String) async -> RPCError? {
            await rpcError {
                _ = try await f.client.call(
                    AccountsRegister.self,
                    .init(username: name, password: "correct horse battery", clientAddress: address, internalToken: AccountsFixture.internalToken))
            }
        }
        for i in 1...3 { #expect(await register("six-\(i)", from: "2001:db8:1:2::\(i)") == nil) }
        #expect(await register("six-4", from: "2001:db8:1:2:ffff::4")?.knownCode == .rateLimited, "the same /64")
        #expect(await register("six-5", from: "2001:db8:1:3::1") == nil, "the next /64 is another subscriber")
    }

    @Test func sessionsHaveAnAbsoluteLifetimeEvenWhenUsedEveryDay() async throws {
        let f = try await AccountsFixture.start {
            $0.sessionLifetimeMs = 2 * 86_400_000
            $0.sessionAbsoluteLifetimeMs = 10 * 86_400_000
        }
        defer { Task { await f.stop() } }
        let token = try await f.register("daily").session.token
        for _ in 0..<9 {
            f.clock.advance(ms: 86_400_000)
            let live = try await f.authenticate(token)
            #expect(live.expiresAtMs <= f.clock.nowMs + 2 * 86_400_000)
        }
        f.clock.advance(ms: 86_400_000)  // day 10: used daily, still over
        #expect(await rpcError { try await f.authenticate(token) }?.reason == "sessionExpired")
    }

    @Test func signingInPastTheCapEvictsTheOldestSession() async throws {
        let f = try await AccountsFixture.start { $0.maxSessionsPerAccount = 3 }
        defer { Task { await f.stop() } }
        let first = try await f.register("many").session.token
        f.clock.advance(ms: 1)
        var later: [String] = []
        for _ in 0..<3 {
            later.append(try await f.login("many").session.token)
            f.clock.advance(ms: 1)
        }
        #expect(await rpcError { try await f.authenticate(first) }?.knownCode == .unauthenticated)
        for token in later { _ = try await f.authenticate(token) }
        #expect(try await f.client.call(AccountsListSessions.self, .init(session: later[2])).sessions.count == 3)
    }

    /// Behind the edge every app shares the edge's TCP address: the edge forwards each app's address, and
    /// accounts believes it only with the internal token.
    @Test func forwardedClientAddressesNeedTheInternalTokenAndGetTheirOwnLimits() async throws {
        let f = try await AccountsFixture.start { $0.throttle.registrationThreshold = 2 }
        defer { Task { await f.stop() } }
        func register(_ name: String, from address: String?, token: String?) async -> RPCError? {
            await rpcError {
                _ = try await f.client.call(
                    AccountsRegister.self,
                    .init(
                        username: name, password: "correct horse battery",
                        clientAddress: address, internalToken: token))
            }
        }
        #expect(await register("a1", from: "203.0.113.1", token: AccountsFixture.internalToken) == nil)
        #expect(await register("a2", from: "203.0.113.1", token: AccountsFixture.internalToken) == nil)
        #expect(await register("a3", from: "203.0.113.1", token: AccountsFixture.internalToken)?.knownCode == .rateLimited)
        // Another app's address has its own count, though every call came from the same TCP peer.
        #expect(await register("b1", from: "203.0.113.2", token: AccountsFixture.internalToken) == nil)
        // Without the token (or with a wrong one) nobody can choose the address they are counted under.
        #expect(await register("c1", from: "203.0.113.3", token: nil)?.knownCode == .forbidden)
        #expect(await register("c2", from: "203.0.113.3", token: "wrong")?.knownCode == .forbidden)
    }
}
