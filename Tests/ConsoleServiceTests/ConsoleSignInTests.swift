import AccountsService
import Foundation
import GRDB
import Logging
import PostgresSupport
import RPCTestSupport
import RPCTransport
import ServiceSupport
import Testing

@testable import ConsoleService

/// The rules of signing in to the console, on its real SQLite store with a clock the tests move: TOTP as RFC 6238 computes
/// it, a code accepted once, accounts' throttle, sessions that end when idle and at their absolute limit, sign-out
/// everywhere, cookies' flags, and plain HTTP refused off loopback.
@Suite struct ConsoleSignInTests {
    /// RFC 6238, appendix B (SHA-1; the last six of the eight digits).
    @Test func totpCodesAreRFC6238s() {
        let totp = TOTP(secret: Array("12345678901234567890".utf8))
        let vectors: [(Int64, String)] = [
            (59, "287082"), (1_111_111_109, "081804"), (1_111_111_111, "050471"), (1_234_567_890, "005924"), (2_000_000_000, "279037"),
            (20_000_000_000, "353130"),
        ]
        for (seconds, code) in vectors { #expect(totp.code(step: TOTP.step(atMs: seconds * 1000)) == code, "at \(seconds)") }
        #expect(totp.matchingStep("287082", nowMs: 59_000) == 1)
        #expect(totp.matchingStep("287082", nowMs: 59_000 + 30_000) == 1, "one step of drift")
        #expect(totp.matchingStep("287082", nowMs: 59_000 + 60_000) == nil, "two steps is too late")
        #expect(totp.matchingStep("28708", nowMs: 59_000) == nil && totp.matchingStep("28708x", nowMs: 59_000) == nil)
        // RFC 4648's test vectors.
        #expect(Base32.encode(Array("foobar".utf8)) == "MZXW6YTBOI" && Base32.encode(Array("f".utf8)) == "MY")
        #expect(Base32.decode("MZXW6YTBOI======") == Array("foobar".utf8) && Base32.decode("MZ1") == nil)
    }

    struct Harness {
        let console: ConsoleService
        let store: any ConsoleStorage
        let clock: ManualClock
        let password: String
        let totp: TOTP
        var now: Int64 { clock.nowMs }
        func code(offset: Int64 = 0) -> String { totp.code(step: TOTP.step(atMs: clock.nowMs) + offset) }
    }

    enum Engine: String, CaseIterable, Sendable { case sqlite, postgres }
    static var engines: [Engine] { TestPostgres.isAvailable ? [.sqlite, .postgres] : [.sqlite] }

    static func harness(_ engine: Engine = .sqlite, _ body: (Harness) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("console-signin-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store: any ConsoleStorage
        switch engine {
        case .sqlite: store = try ConsoleStore.open(directory: directory)
        case .postgres:
            let url = try PostgresURL(try await TestPostgres.newDatabase())
            store = try await PostgresConsoleStore(pool: try PostgresPool(url: url, schema: "console", connections: 2, logger: Logger(label: "t")))
        }
        let clock = ManualClock()
        var config = ConsoleConfiguration(adminToken: "a", internalToken: "b")
        config.clock = clock.clock
        let hasher = PasswordHasher(parameters: .testing, concurrency: 1)
        // Never called: these tests stop at signing in.
        let nowhere = RPCClient(host: "127.0.0.1", port: 9)
        let console = try ConsoleService(
            store: store, accounts: nowhere, fulfillment: nowhere, catalog: nowhere, configuration: config, hasher: hasher, logger: .init(label: "t"))
        let created = try await ConsoleService.addOperator("Sam", role: .support, store: store, hasher: hasher, nowMs: clock.nowMs)
        try await body(
            Harness(console: console, store: store, clock: clock, password: created.password, totp: TOTP(secret: Base32.decode(created.totpSecret)!)))
        await console.close()
    }

    @Test(arguments: engines) func aCodeWorksOnceAndBothFactorsAreNeeded(engine: Engine) async throws {
        try await Self.harness(engine) { h in
            #expect(try await h.console.signIn(username: "sam", password: "wrong", code: h.code(), address: "10.0.0.1") == .refused)
            #expect(try await h.console.signIn(username: "sam", password: h.password, code: h.code(offset: 5), address: "10.0.0.1") == .refused)
            guard case .signedIn(let token) = try await h.console.signIn(username: "SAM", password: h.password, code: h.code(), address: "10.0.0.1")
            else { Issue.record("not signed in"); return }
            // The same code again, even with the password: refused (someone who watched it typed cannot reuse it).
            #expect(try await h.console.signIn(username: "sam", password: h.password, code: h.code(), address: "10.0.0.1") == .refused)
            // So is the step before (it is older than the one accepted); the next step's code works.
            #expect(try await h.console.signIn(username: "sam", password: h.password, code: h.code(offset: -1), address: "10.0.0.1") == .refused)
            h.clock.advance(ms: 30_000)
            guard case .signedIn = try await h.console.signIn(username: "sam", password: h.password, code: h.code(), address: "10.0.0.1")
            else { Issue.record("the next step's code was refused"); return }
            #expect(try await h.console.session(token: token)?.operatorName == "sam")
            #expect(try await h.console.signIn(username: "nobody", password: h.password, code: h.code(), address: "10.0.0.1") == .refused)
        }
    }

    @Test(arguments: engines) func guessesAreThrottledByAccountsRules(engine: Engine) async throws {
        try await Self.harness(engine) { h in
            for _ in 0..<5 {
                #expect(try await h.console.signIn(username: "sam", password: "guess", code: "000000", address: "10.0.0.2") == .refused)
            }
            guard case .throttled(let wait) = try await h.console.signIn(username: "sam", password: h.password, code: h.code(), address: "10.0.0.2")
            else { Issue.record("the sixth attempt from the address was not throttled"); return }
            #expect(wait == LoginThrottlePolicy().baseLockMs, "accounts' lock: a second after the fifth failure")
            // The owner from elsewhere is not locked out by the guesser.
            guard case .signedIn = try await h.console.signIn(username: "sam", password: h.password, code: h.code(), address: "10.0.0.3")
            else { Issue.record("the owner was locked out by someone else's guesses"); return }
            // Counters whose window ended and whose lock passed are deleted as new attempts come.
            if let sqlite = h.store as? ConsoleStore {
                let count = { try await sqlite.writer.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM sign_in_throttle") ?? 0 } }
                #expect(try await count() == 2, "the guesser's pair key and address key (the owner's success cleared the name's and its own)")
                h.clock.advance(ms: LoginThrottlePolicy().windowMs + LoginThrottlePolicy().maxLockMs + 1)
                _ = try await h.console.signIn(username: "other", password: "x", code: "000000", address: "10.0.0.9")
                #expect(try await count() == 3, "only the new attempt's three keys are left")
            }
        }
    }

    /// A password pasted into the name field while the address is throttled stays out of the audit log (it was written
    /// down as the operator's name there, lower-cased; the refused branch already wrote "(unknown)").
    @Test(arguments: engines) func aThrottledSignInWritesNoTypedNameThatIsNoOperator(engine: Engine) async throws {
        try await Self.harness(engine) { h in
            for _ in 0..<LoginThrottlePolicy().addressThreshold {
                _ = try await h.console.signIn(username: "nobody-\(UUID().uuidString)", password: "x", code: "000000", address: "10.0.0.4")
            }
            guard case .throttled = try await h.console.signIn(username: h.password, password: "x", code: "000000", address: "10.0.0.4")
            else { Issue.record("the address was not throttled"); return }
            guard case .throttled = try await h.console.signIn(username: "sam", password: "x", code: "000000", address: "10.0.0.4")
            else { Issue.record("the address was not throttled"); return }
            let throttled = try await h.store.audit(operatorName: nil, action: "signInThrottled", limit: 10).map(\.operatorName)
            #expect(throttled.sorted() == ["(unknown)", "sam"], "\(throttled)")
            let everything = try await h.store.audit(operatorName: nil, action: nil, limit: 500).map(\.operatorName)
            #expect(!everything.contains(h.password.lowercased()))
        }
    }

    /// A client looping on a locked name writes one `signInThrottled` row per lock, not one per request (the log is
    /// append-only); the next lock is written down again.
    @Test(arguments: engines) func aLockIsWrittenDownOnceHoweverOftenItIsHit(engine: Engine) async throws {
        try await Self.harness(engine) { h in
            for _ in 0..<5 {
                #expect(try await h.console.signIn(username: "sam", password: "guess", code: "000000", address: "10.0.0.5") == .refused)
            }
            for _ in 0..<40 {
                guard case .throttled = try await h.console.signIn(username: "sam", password: "guess", code: "000000", address: "10.0.0.5")
                else { Issue.record("the locked name was let in"); return }
            }
            let rows = { try await h.store.audit(operatorName: "sam", action: "signInThrottled", limit: 100).count }
            #expect(try await rows() == 1)
            // The lock passes; one more failure locks again (twice as long): a new lock, a new row.
            h.clock.advance(ms: LoginThrottlePolicy().baseLockMs)
            #expect(try await h.console.signIn(username: "sam", password: "guess", code: "000000", address: "10.0.0.5") == .refused)
            for _ in 0..<3 {
                guard case .throttled = try await h.console.signIn(username: "sam", password: "guess", code: "000000", address: "10.0.0.5")
                else { Issue.record("the name was not locked again"); return }
            }
            #expect(try await rows() == 2)
            // Two unknown names locked from one address, a millisecond apart, tried in turns: one row each.
            for name in ["ghost-a", "ghost-b"] {
                for _ in 0..<5 { _ = try await h.console.signIn(username: name, password: "x", code: "000000", address: "10.0.0.6") }
                h.clock.advance(ms: 1)
            }
            for _ in 0..<10 {
                for name in ["ghost-a", "ghost-b"] {
                    guard case .throttled = try await h.console.signIn(username: name, password: "x", code: "000000", address: "10.0.0.6")
                    else { Issue.record("\(name) was not locked"); return }
                }
            }
            #expect(try await h.store.audit(operatorName: "(unknown)", action: "signInThrottled", limit: 100).count == 2)
        }
    }

    /// The notes stay bounded: locks that ended go first; when every entry is live, all are forgotten (a row too many,
    /// never a lock unrecorded).
    @Test func throttleNotesStayBounded() {
        let notes = ThrottleNotes(capacity: 3)
        #expect(notes.isFirst(name: "a", address: "x", lockEndsMs: 100, nowMs: 0))
        #expect(!notes.isFirst(name: "a", address: "x", lockEndsMs: 100, nowMs: 50))
        // Two locks of one name and address, met in turns (two unknown names' from one address): each written once.
        #expect(notes.isFirst(name: "b", address: "x", lockEndsMs: 300, nowMs: 50))
        #expect(notes.isFirst(name: "b", address: "x", lockEndsMs: 310, nowMs: 50))
        #expect(!notes.isFirst(name: "b", address: "x", lockEndsMs: 300, nowMs: 60))
        #expect(!notes.isFirst(name: "b", address: "x", lockEndsMs: 310, nowMs: 60))
        #expect(notes.isFirst(name: "c", address: "x", lockEndsMs: 300, nowMs: 200))  // full: a's ended lock goes
        #expect(!notes.isFirst(name: "b", address: "x", lockEndsMs: 300, nowMs: 200))
        #expect(notes.isFirst(name: "d", address: "x", lockEndsMs: 400, nowMs: 250))  // full of live locks: all forgotten
        #expect(notes.isFirst(name: "b", address: "x", lockEndsMs: 300, nowMs: 250))
    }

    /// Failures from one IPv6 /64 count as from one address: a host has every address of its /64.
    @Test func anIPv6NetworkIsOneAddressToTheLimits() async throws {
        try await Self.harness { h in
            for i in 0..<LoginThrottlePolicy().addressThreshold {
                _ = try await h.console.signIn(username: "nobody-\(i)", password: "x", code: "000000", address: "2001:db8:5:6::\(i + 1)")
            }
            guard case .throttled = try await h.console.signIn(username: "sam", password: "x", code: "000000", address: "2001:db8:5:6:ffff::9")
            else { Issue.record("another address of the same /64 was not throttled"); return }
            #expect(try await h.console.signIn(username: "sam", password: "x", code: "000000", address: "2001:db8:5:7::1") == .refused)
        }
    }

    @Test(arguments: engines) func sessionsEndWhenIdleAtTheirLimitAndEverywhereAtOnce(engine: Engine) async throws {
        try await Self.harness(engine) { h in
            guard case .signedIn(let first) = try await h.console.signIn(username: "sam", password: h.password, code: h.code(), address: nil)
            else { Issue.record("not signed in"); return }
            let idle = h.console.configuration.sessionIdleMs
            h.clock.advance(ms: idle - 1)
            #expect(try await h.console.session(token: first) != nil, "used before its idle limit: it slides")
            h.clock.advance(ms: idle - 1)
            #expect(try await h.console.session(token: first) != nil)
            h.clock.advance(ms: idle)
            #expect(try await h.console.session(token: first) == nil, "idle too long")
            // However busy, a session ends at its absolute limit.
            h.clock.advance(ms: 30_000)
            guard case .signedIn(let second) = try await h.console.signIn(username: "sam", password: h.password, code: h.code(), address: nil)
            else { Issue.record("not signed in"); return }
            var elapsed: Int64 = 0
            while elapsed + idle / 2 < h.console.configuration.sessionAbsoluteMs {
                h.clock.advance(ms: idle / 2)
                elapsed += idle / 2
                #expect(try await h.console.session(token: second) != nil)
            }
            h.clock.advance(ms: idle / 2)
            #expect(try await h.console.session(token: second) == nil, "past the absolute limit")
            // Sign-out everywhere ends every session of the operator.
            h.clock.advance(ms: 30_000)
            guard case .signedIn(let a) = try await h.console.signIn(username: "sam", password: h.password, code: h.code(), address: nil) else {
                return
            }
            h.clock.advance(ms: 30_000)
            guard case .signedIn(let b) = try await h.console.signIn(username: "sam", password: h.password, code: h.code(), address: nil) else {
                return
            }
            #expect(try await h.store.deleteSessions(operatorName: "sam") == 2)
            #expect(try await h.console.session(token: a) == nil)
            #expect(try await h.console.session(token: b) == nil)
            #expect(try await h.console.session(token: "not-a-token") == nil)
        }
    }

    @Test(arguments: engines) func aNewRoleOrRemovalEndsTheOperatorsSessions(engine: Engine) async throws {
        try await Self.harness(engine) { h in
            guard case .signedIn(let token) = try await h.console.signIn(username: "sam", password: h.password, code: h.code(), address: nil)
            else { Issue.record("not signed in"); return }
            #expect(try await h.console.session(token: token)?.role == .support)
            #expect(try await h.store.setRole("sam", role: .viewer))
            #expect(try await h.console.session(token: token) == nil, "the old role's session ended")
            h.clock.advance(ms: 30_000)
            guard case .signedIn(let again) = try await h.console.signIn(username: "sam", password: h.password, code: h.code(), address: nil)
            else { Issue.record("not signed in again"); return }
            #expect(try await h.console.session(token: again)?.role == .viewer)
            #expect(try await h.store.removeOperator("sam"))
            #expect(try await h.console.session(token: again) == nil)
            h.clock.advance(ms: 30_000)
            #expect(try await h.console.signIn(username: "sam", password: h.password, code: h.code(), address: nil) == .refused)
            #expect(try await h.store.removeOperator("sam") == false)
            #expect(try await h.store.setRole("sam", role: .admin) == false)
        }
    }

    @Test func cookiesAreHttpOnlyStrictAndSecureOverTLS() async throws {
        try await Self.harness { h in
            let plain = h.console.cookie("iap_console", value: "v", maxAgeSeconds: 60)
            #expect(plain == "iap_console=v; Path=/; HttpOnly; SameSite=Strict; Max-Age=60")
        }
        var config = ConsoleConfiguration(adminToken: "a", internalToken: "b")
        config.secureCookies = true
        let nowhere = RPCClient(host: "127.0.0.1", port: 9)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("console-cookie-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let console = try ConsoleService(
            store: try ConsoleStore.open(directory: directory), accounts: nowhere, fulfillment: nowhere, catalog: nowhere, configuration: config,
            hasher: PasswordHasher(parameters: .testing, concurrency: 1), logger: .init(label: "t"))
        #expect(console.cookie("iap_console", value: "v", maxAgeSeconds: 60).hasSuffix("; Secure"))
        #expect(console.sessionCookie == "__Host-iap_console" && console.signInCookie == "__Host-iap_console_signin", "no other host may set them")
        await console.close()
    }

    @Test func plainHTTPIsRefusedOffLoopback() async throws {
        #expect(throws: ConsoleConfiguration.PlainHTTPRefused.self) { try ConsoleConfiguration.checkBind(host: "0.0.0.0", tls: false) }
        #expect(throws: ConsoleConfiguration.PlainHTTPRefused.self) { try ConsoleConfiguration.checkBind(host: "10.1.2.3", tls: false) }
        #expect(throws: ConsoleConfiguration.PlainHTTPRefused.self) { try ConsoleConfiguration.checkBind(host: "127.evil.example", tls: false) }
        #expect(throws: ConsoleConfiguration.PlainHTTPRefused.self) { try ConsoleConfiguration.checkBind(host: "127.0.0.1.nip.io", tls: false) }
        try ConsoleConfiguration.checkBind(host: "127.0.0.2", tls: false)
        try ConsoleConfiguration.checkBind(host: "0.0.0.0", tls: true)
        try ConsoleConfiguration.checkBind(host: "127.0.0.1", tls: false)
        let refused = try await BuiltExecutables.run(
            "console-service", ["--host", "0.0.0.0", "--port", "0"],
            env: ["IAP_ADMIN_TOKEN": String(repeating: "a", count: 32), "IAP_INTERNAL_TOKEN": String(repeating: "b", count: 32)])
        #expect(refused.status != 0 && refused.stderr.contains("not a loopback address"), "\(refused.stderr)")
    }
}

/// `iap console add-operator`: the first operator, written straight into the console's database.
@Suite struct AddOperatorCommandTests {
    @Test func addOperatorPrintsThePasswordAndSecretOnceAndTheyWork() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("console-cli-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let made = try await BuiltExecutables.run(
            "iap", ["console", "add-operator", "Ops.Lead", "--role", "admin", "--data-dir", directory.path, "--json"])
        #expect(made.status == 0, "\(made.stderr)")
        let answer = try JSONDecoder().decode([String: String].self, from: Data(made.stdout.utf8))
        let password = try #require(answer["password"]), secret = try #require(answer["totpSecret"])
        #expect(password.count == 43 && Base32.decode(secret)?.count == 20)
        let again = try await BuiltExecutables.run("iap", ["console", "add-operator", "ops.lead", "--role", "viewer", "--data-dir", directory.path])
        #expect(again.status != 0 && again.stderr.contains("exists already"), "\(again.stderr)")
        let badRole = try await BuiltExecutables.run("iap", ["console", "add-operator", "x", "--role", "root", "--data-dir", directory.path])
        #expect(badRole.status != 0 && badRole.stderr.contains("--role must be viewer, support or admin"))
        // What it wrote: the role, an scrypt hash of the printed password, the printed secret; the file private.
        let store = try ConsoleStore.open(directory: directory)
        defer { try? store.close() }
        let record = try #require(try await store.operatorRecord("ops.lead"))
        #expect(record.role == .admin && record.totpSecret == Base32.decode(secret))
        let hasher = PasswordHasher(parameters: .testing, concurrency: 1)
        #expect(try await hasher.verify(password, against: record.passwordHash).matches)
        await hasher.shutdown()
        let mode =
            try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent("console.sqlite").path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }
}

/// The overview's drawing and money, pure.
@Suite struct OverviewDrawingTests {
    @Test func moneyIsMilliunitsAsUnitsAndChartsCarryOnlyNumbersAndEscapedText() {
        #expect(ConsoleService.money(990) == "0.99" && ConsoleService.money(1000) == "1.00" && ConsoleService.money(12_345) == "12.35")
        #expect(ConsoleService.money(0) == "0.00" && ConsoleService.money(1_999_995) == "2000.00")
        let chart = ConsoleService.barChart("<b>\"x\"</b>", [0, 2, 4], labels: ["a&b", "b", "c"])
        #expect(chart.hasPrefix("<svg ") && chart.hasSuffix("</svg>"))
        #expect(!chart.contains("<b>") && chart.contains("&lt;b&gt;&quot;x&quot;&lt;/b&gt;") && chart.contains("a&amp;b"))
        #expect(chart.components(separatedBy: "<rect ").count - 1 == 3)
        #expect(chart.contains(">4</text>"), "the largest value beside the axis")
        #expect(ConsoleService.barChart("t", [0, 0], labels: []).contains(">0</text>"), "all zeros: 0 beside the axis, no bar drawn tall")
    }
}

/// The edge takes the same loopback rule: a host name that starts with "127." is not loopback.
@Suite struct EdgeLoopbackTests {
    @Test func theEdgeRefusesPlainHTTPOnANameThatOnlyLooksLikeLoopback() async throws {
        #expect(Loopback.contains("127.0.0.1") && Loopback.contains("::1") && Loopback.contains("localhost"))
        #expect(!Loopback.contains("127.evil.example") && !Loopback.contains("127.0.0.1.nip.io") && !Loopback.contains("0.0.0.0"))
        let refused = try await BuiltExecutables.run("edge-service", ["--host", "127.evil.example", "--port", "0"])
        #expect(refused.status != 0 && refused.stderr.contains("not a loopback address"), "\(refused.stderr)")
    }
}
