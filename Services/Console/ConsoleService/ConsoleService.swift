import AccountsService
import Crypto
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import Mustache
import RPCTransport
import ServiceSupport

/// The support console: operators sign in with a password and a TOTP code, then read customers and act on them through
/// fulfillment's and accounts' methods (admin and internal tokens). The console keeps only its operators, their sessions
/// and its own audit log; every number it shows comes from the services.
public final class ConsoleService: Sendable {
    let store: any ConsoleStorage
    let hasher: PasswordHasher
    let accounts: RPCClient
    let fulfillment: RPCClient
    let catalog: RPCClient
    let configuration: ConsoleConfiguration
    let library: MustacheLibrary
    let logger: Logger
    let throttleNotes = ThrottleNotes()

    /// The session cookie's name: over TLS with `__Host-`, so no sibling subdomain can set one for the console (fixation,
    /// signing an operator in as someone else). Browsers do not keep cookies apart by port: whatever serves pages on
    /// another port of the same host name can still set it (docs/services/console.md: a host name of its own).
    var sessionCookie: String { (configuration.secureCookies ? "__Host-" : "") + "iap_console" }
    /// The sign-in form's CSRF cookie (before there is a session).
    var signInCookie: String { (configuration.secureCookies ? "__Host-" : "") + "iap_console_signin" }

    public init(
        store: any ConsoleStorage, accounts: RPCClient, fulfillment: RPCClient, catalog: RPCClient, configuration: ConsoleConfiguration,
        hasher: PasswordHasher = PasswordHasher(parameters: .default, concurrency: 1, maxPending: 16), logger: Logger
    ) throws {
        self.store = store
        self.accounts = accounts
        self.fulfillment = fulfillment
        self.catalog = catalog
        self.configuration = configuration
        self.hasher = hasher
        self.logger = logger
        self.library = try ConsoleTemplates.library()
    }

    public func close() async {
        await accounts.close()
        await fulfillment.close()
        await catalog.close()
        await hasher.shutdown()
        try? store.close()
    }

    // MARK: operators

    /// A new operator with a random password and TOTP secret (what `iap console add-operator` prints, once).
    public static func addOperator(
        _ name: String, role: OperatorRole, store: any ConsoleStorage, hasher: PasswordHasher, nowMs: Int64
    ) async throws -> (password: String, totpSecret: String) {
        guard let key = OperatorRecord.normalized(name) else { throw InvalidOperatorName(name: name) }
        let password = SessionTokens.generate()
        let totp = TOTP.random()
        try await store.addOperator(
            OperatorRecord(name: key, role: role, passwordHash: try await hasher.hash(password), totpSecret: totp.secret, createdAtMs: nowMs))
        return (password, Base32.encode(totp.secret))
    }

    public struct InvalidOperatorName: Error, CustomStringConvertible {
        public let name: String
        public var description: String { "operator names are 1-64 letters, digits, '.', '_', '-' or '@'" }
    }

    // MARK: signing in

    public enum SignInOutcome: Sendable, Equatable {
        /// The new session's token (the cookie's value).
        case signedIn(token: String)
        case refused
        /// Too many attempts: wait this long.
        case throttled(retryAfterMs: Int64)
    }

    /// Password and TOTP code, both required; attempts are counted before either is checked (accounts' limits), a code
    /// works once, and an unknown name costs the same scrypt work as a known one.
    func signIn(username: String, password: String, code: String, address: String?) async throws -> SignInOutcome {
        let now = configuration.clock.nowMs
        let name = OperatorRecord.normalized(username) ?? "-"
        let nameKeys = [LoginThrottlePolicy.usernameKey("console:" + name), LoginThrottlePolicy.pairKey("console:" + name, address: address)]
        let addressKey = address.map { LoginThrottlePolicy.addressKey("console:" + ClientAddress.limitKey($0)) }  // IPv6: its /64
        let wait = try await store.admitAttempt(keys: nameKeys + (addressKey.map { [$0] } ?? []), policy: configuration.throttle, nowMs: now)
        guard wait == 0 else {
            // As below: only an operator's name is written down, never what was typed (a pasted password).
            let known = try await store.operatorRecord(name) != nil ? name : "(unknown)"
            if throttleNotes.isFirst(name: known, address: address.map(ClientAddress.limitKey) ?? "-", lockEndsMs: now + wait, nowMs: now) {
                try await store.recordAudit(operatorName: known, action: "signInThrottled", detail: "", address: address, nowMs: now)
            }
            return .throttled(retryAfterMs: wait)
        }
        guard let record = try await store.operatorRecord(name) else {
            try await hasher.burnEquivalentWork(password)
            // Not the name typed: a password pasted into the name field must not land in the log.
            try await store.recordAudit(operatorName: "(unknown)", action: "signInRefused", detail: "", address: address, nowMs: now)
            return .refused
        }
        let passwordMatches = try await hasher.verify(password, against: record.passwordHash).matches
        let step = TOTP(secret: record.totpSecret).matchingStep(code, nowMs: now)
        guard passwordMatches, let step, try await store.acceptTotpStep(name, step: step) else {
            // Which factor failed is not written down: the log would tell its readers whether a guessed password was right.
            try await store.recordAudit(operatorName: name, action: "signInRefused", detail: "", address: address, nowMs: now)
            return .refused
        }
        try await store.signInSucceeded(nameKeys: nameKeys, addressKey: addressKey, policy: configuration.throttle)
        let token = SessionTokens.generate()
        try await store.createSession(
            tokenHash: Self.tokenHash(token), operatorName: name, csrfToken: SessionTokens.generate(), nowMs: now,
            expiresAtMs: now + configuration.sessionIdleMs)
        try await store.recordAudit(operatorName: name, action: "signIn", detail: "", address: address, nowMs: now)
        logger.notice("operator signed in", metadata: ["operator": "\(name)"])
        return .signedIn(token: token)
    }

    /// The live session of a cookie's token, if any.
    func session(token: String?) async throws -> OperatorSession? {
        guard let token, token.utf8.count == 43 else { return nil }
        return try await store.session(
            tokenHash: Self.tokenHash(token), nowMs: configuration.clock.nowMs, idleMs: configuration.sessionIdleMs,
            absoluteMs: configuration.sessionAbsoluteMs)
    }

    static func tokenHash(_ token: String) -> [UInt8] { Array(SHA256.hash(data: Array(token.utf8))) }

    /// `Set-Cookie` for a session (or for ending one, with an empty value): never readable by scripts, never sent by
    /// another site's request, `Secure` whenever the console serves TLS.
    func cookie(_ name: String, value: String, maxAgeSeconds: Int64) -> String {
        var parts = ["\(name)=\(value)", "Path=/", "HttpOnly", "SameSite=Strict", "Max-Age=\(maxAgeSeconds)"]
        if configuration.secureCookies { parts.append("Secure") }
        return parts.joined(separator: "; ")
    }

    /// Constant-time comparison of a form's CSRF token with the expected one.
    static func tokensMatch(_ given: String?, _ expected: String) -> Bool {
        guard let given else { return false }
        return SecretComparison.equal(Array(given.utf8), Array(expected.utf8))
    }
}
