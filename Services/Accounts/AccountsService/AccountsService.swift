import Crypto
import Foundation
import IAPProtocol
import JSONRPC
import Logging
import ServiceSupport
import Synchronization

/// Users, password login and sessions. Every public method returns the contract's result type or
/// throws an `RPCError` with the contract's code; nothing is changed by a call that fails.
public final class AccountsService: Sendable {
    let store: any AccountsStorage
    private let hasher: PasswordHasher
    let configuration: AccountsConfiguration
    let clock: ServiceClock
    let logger: Logger
    /// Attempts admitted so far, for the periodic sweep of expired throttle counters.
    private let throttleSweeps = Mutex(0)
    /// Asks verification about a signed AppTransaction; nil: `linkAppTransaction` is unavailable.
    let appTransactionVerifier: AppTransactionVerifier?

    public init(
        store: any AccountsStorage, configuration: AccountsConfiguration, clock: ServiceClock = .system, logger: Logger,
        appTransactionVerifier: AppTransactionVerifier? = nil
    ) {
        self.appTransactionVerifier = appTransactionVerifier
        self.store = store
        self.configuration = configuration
        self.clock = clock
        self.logger = logger
        self.hasher = PasswordHasher(
            parameters: configuration.passwordHashing, concurrency: configuration.hashingConcurrency,
            maxPending: configuration.hashingQueueLimit)
    }

    /// scrypt derivations run so far (tests read it to count password guesses).
    package var passwordDerivations: Int { hasher.derivations }

    public func shutdown() async {
        await hasher.shutdown()
    }

    // MARK: register / login

    /// The address the sign-in and registration limits key on: the TCP peer, or, from the edge (which
    /// proves itself with the internal token), the app's address it forwards.
    func clientAddress(_ p: Credentials, peer: String?) throws(RPCError) -> String? {
        guard let forwarded = p.clientAddress else { return peer }
        try TokenGate.internal.check(p.internalToken, configured: configuration.internalToken)
        guard !forwarded.isEmpty, forwarded.utf8.count <= 64 else {
            throw RPCError.invalidParams("clientAddress must be 1-64 bytes", field: "clientAddress", reason: "invalidValue")
        }
        return forwarded
    }

    public func register(_ p: Credentials, clientAddress: String? = nil) async throws(RPCError) -> SignedIn {
        let (display, key) = try UsernamePolicy.normalize(p.username)
        try PasswordPolicy.check(p.password, username: display)
        try DeviceNamePolicy.check(p.deviceName)
        if let clientAddress {
            try await admit([LoginThrottlePolicy.registrationKey(clientAddress)], detail: "too many registrations from this address")
        }
        let hash = try await run { try await self.hasher.hash(p.password) }
        let account = AccountRow(
            id: UUID().uuidString.lowercased(), username: display, passwordHash: hash,
            appAccountToken: UUID().uuidString.lowercased())
        let now = clock.nowMs
        let (token, session) = newSession(deviceName: p.deviceName, nowMs: now)
        let outcome = try await run { try await self.store.createAccount(account, usernameKey: key, session: session, nowMs: now) }
        guard outcome == .created else {
            throw RPCError.conflict("username \"\(display)\" is taken", reason: "usernameTaken")
        }
        logger.info("account registered", metadata: ["accountId": "\(account.id)"])
        return SignedIn(
            accountId: account.id, appAccountToken: account.appAccountToken,
            session: SessionToken(token: token, expiresAtMs: session.expiresAtMs))
    }

    /// Same reply, same error and the same work whether the username exists or not; failures count
    /// towards the username's and the address's limits.
    public func login(_ p: Credentials, clientAddress: String?) async throws(RPCError) -> SignedIn {
        guard p.password.utf8.count <= PasswordPolicy.maxBytes else {
            throw RPCError.invalidParams("password is longer than \(PasswordPolicy.maxBytes) bytes", field: "password", reason: "tooLong")
        }
        try DeviceNamePolicy.check(p.deviceName)
        let (_, key) = try UsernamePolicy.normalize(p.username)
        let throttleKeys =
            [LoginThrottlePolicy.usernameKey(key), LoginThrottlePolicy.pairKey(key, address: clientAddress)]
            + (clientAddress.map { [LoginThrottlePolicy.addressKey($0)] } ?? [])
        // Counted before any password is checked: a batch or many connections cannot race the limit.
        try await admit(throttleKeys, detail: "too many failed sign-in attempts")

        let account = try await run { try await self.store.account(usernameKey: key) }
        guard let account else {
            try await run { try await self.hasher.burnEquivalentWork(p.password) }
            throw Self.invalidCredentials
        }
        let verdict = try await run { try await self.hasher.verify(p.password, against: account.passwordHash) }
        guard verdict.matches else { throw Self.invalidCredentials }
        // A success clears the username's count and takes its own attempt back from the address's.
        let policy = configuration.throttle
        try await run {
            try await self.store.updateThrottle(keys: throttleKeys) { key, state in
                key.hasPrefix("addr:") ? policy.returningAttempt(state, key: key) : nil
            }
        }
        var verified = account.passwordHash
        if verdict.needsRehash {
            // Raise the stored hash to the current parameters while the password is at hand.
            let upgraded = try await run { try await self.hasher.hash(p.password) }
            try await run { try await self.store.replacePasswordHash(accountId: account.id, expected: account.passwordHash, new: upgraded) }
            verified = upgraded
        }
        let now = clock.nowMs
        let (token, session) = newSession(deviceName: p.deviceName, nowMs: now)
        let cap = configuration.maxSessionsPerAccount, hash = verified
        // Only while the password checked is still the account's: one changed meanwhile gives this sign-in no session.
        // (A concurrent sign-in's rehash lands here too: that rare sign-in is refused, and the next succeeds.)
        guard try await run({ try await self.store.addSession(session, accountId: account.id, passwordHash: hash, nowMs: now, cap: cap) })
        else { throw Self.invalidCredentials }
        return SignedIn(
            accountId: account.id, appAccountToken: account.appAccountToken,
            session: SessionToken(token: token, expiresAtMs: session.expiresAtMs))
    }

    private static let invalidCredentials = RPCError(
        code: .unauthenticated, message: "invalid username or password",
        reason: .invalidCredentials)

    /// Refuses the attempt while any key is locked; otherwise counts it against every key, atomically. Every
    /// 64th attempt also forgets expired counters (their window over, their lock ended) and keeps the table bounded.
    private func admit(_ keys: [String], detail: String) async throws(RPCError) {
        let now = clock.nowMs
        let policy = configuration.throttle
        if throttleSweeps.withLock({ count in
            count += 1
            return count % 64 == 1
        }) {
            _ = try await run {
                try await self.store.expireThrottle(windowEndedBeforeMs: now - policy.windowMs, nowMs: now, maxRows: policy.maxRows)
            }
        }
        let wait = try await run {
            try await self.store.admitAttempt(
                keys: keys, wait: { _, state in policy.retryAfterMs(state, nowMs: now) },
                record: { key, state in policy.recordingFailure(state, key: key, nowMs: now) })
        }
        if wait > 0 { throw RPCError.rateLimited(retryAfterMs: wait, detail: detail) }
    }

    // MARK: sessions

    /// Resolves a session token: one indexed read; a write at most once per touch interval.
    /// Synchronous: served from the server's blocking pool (the hot path of the whole suite).
    public func authenticate(_ token: String) throws(RPCError) -> AuthenticatedAccount {
        Self.authenticated(try currentSession(token))
    }

    /// `authenticate` answered on the event loop when that needs no waiting: the store can read without waiting
    /// now (`sessionWithoutWaiting`: SQLite, its inline reader free; PostgreSQL, the session kept by its cache) and the
    /// session is not due its touch (a write). Nil otherwise: `authenticate` answers on the blocking pool. The same
    /// checks in the same order, so both give the same answer for the same token.
    public func authenticateWithoutWaiting(_ token: String) throws(RPCError) -> AuthenticatedAccount? {
        try currentSession(token, inline: true).map(Self.authenticated)
    }

    private static func authenticated(_ session: SessionRow) -> AuthenticatedAccount {
        AuthenticatedAccount(
            accountId: session.accountId, username: session.username,
            appAccountToken: session.appAccountToken, expiresAtMs: session.expiresAtMs)
    }

    /// Synchronous (blocking pool), like `authenticate`.
    public func logout(_ token: String) throws(RPCError) {
        let session = try currentSession(token)
        try runBlocking { try self.store.deleteSession(tokenHash: session.tokenHash) }
    }

    public func changePassword(_ p: AccountsChangePassword.Params) async throws(RPCError) {
        // A brief indexed read on this task's thread; the slow parts (two scrypt runs) are on the hasher's pool.
        let session = try currentSession(p.session)
        try PasswordPolicy.check(p.newPassword, username: session.username, field: "newPassword")
        guard p.currentPassword.utf8.count <= PasswordPolicy.maxBytes,
            let account = try await run({ try await self.store.account(id: session.accountId) })
        else {
            throw Self.invalidCredentials
        }
        // As a sign-in's limits: the name's, and this session's at the name as if it were an address (someone holding
        // a stolen session must not guess the password faster than from one address, then change it and lock the owner out).
        let name = (try? UsernamePolicy.normalize(account.username).key) ?? account.username.lowercased()
        let throttleKeys = [LoginThrottlePolicy.usernameKey(name), LoginThrottlePolicy.sessionKey(name, tokenHash: session.tokenHash)]
        try await admit(throttleKeys, detail: "too many failed password checks")
        let verdict = try await run { try await self.hasher.verify(p.currentPassword, against: account.passwordHash) }
        guard verdict.matches else {
            throw RPCError(code: .unauthenticated, message: "current password is wrong", reason: .invalidCredentials)
        }
        try await run { try await self.store.updateThrottle(keys: throttleKeys) { _, _ in nil } }
        let newHash = try await run { try await self.hasher.hash(p.newPassword) }
        let changed = try await run {
            try await self.store.changePassword(
                accountId: account.id, expected: account.passwordHash, new: newHash,
                keepSession: session.tokenHash)
        }
        guard changed else {
            throw RPCError.conflict("the password was changed concurrently; sign in again", reason: "concurrentChange")
        }
        logger.info("password changed; other sessions revoked", metadata: ["accountId": "\(account.id)"])
    }

    /// Synchronous (blocking pool), like `authenticate`.
    public func listSessions(_ token: String) throws(RPCError) -> [SessionInfo] {
        let current = try currentSession(token)
        let now = clock.nowMs
        let rows = try runBlocking { try self.store.sessions(accountId: current.accountId, nowMs: now) }
        return rows.map {
            SessionInfo(
                deviceName: $0.deviceName, createdAtMs: $0.createdAtMs, lastSeenAtMs: $0.lastSeenAtMs,
                current: $0.tokenHash == current.tokenHash)
        }
    }

    public func findByAppAccountToken(_ p: AccountsFindByAppAccountToken.Params) async throws(RPCError) -> String {
        try TokenGate.internal.check(p.internalToken, configured: configuration.internalToken)
        guard let id = try await run({ try await self.store.accountId(appAccountToken: p.appAccountToken.lowercased()) }) else {
            throw RPCError.notFound("no account has this appAccountToken", reason: "unknownAppAccountToken")
        }
        return id
    }

    public func setConsumptionConsent(_ p: AccountsSetConsumptionConsent.Params) async throws(RPCError) -> AccountsSetConsumptionConsent.Result {
        let account = try authenticate(p.session)
        try await run { try await self.store.setConsumptionConsent(accountId: account.accountId, consent: p.consent) }
        return .init(consent: p.consent)
    }

    public func consumptionProfile(_ p: AccountsConsumptionProfile.Params) async throws(RPCError) -> AccountsConsumptionProfile.Result {
        try TokenGate.internal.check(p.internalToken, configured: configuration.internalToken)
        guard let profile = try await run({ try await self.store.consumptionProfile(accountId: p.accountId) }) else {
            throw RPCError.notFound("no such account", reason: "unknownAccount")
        }
        return .init(consent: profile.consent, createdAtMs: profile.createdAtMs, appAccountToken: profile.appAccountToken)
    }

    public func getAccount(_ p: AccountsGetAccount.Params) async throws(RPCError) -> AccountsGetAccount.Result {
        try TokenGate.internal.check(p.internalToken, configured: configuration.internalToken)
        guard let account = try await run({ try await self.store.account(id: p.accountId) }),
            let profile = try await run({ try await self.store.consumptionProfile(accountId: p.accountId) })
        else { throw RPCError.notFound("no such account", reason: "unknownAccount") }
        return .init(accountId: account.id, username: account.username, appAccountToken: account.appAccountToken, createdAtMs: profile.createdAtMs)
    }

    public func findByUsername(_ p: AccountsFindByUsername.Params) async throws(RPCError) -> AccountsFindByUsername.Result {
        try TokenGate.internal.check(p.internalToken, configured: configuration.internalToken)
        let (_, key) = try UsernamePolicy.normalize(p.username)
        guard let account = try await run({ try await self.store.account(usernameKey: key) }) else {
            throw RPCError.notFound("no account has this username", reason: "unknownUsername")
        }
        return .init(accountId: account.id, appAccountToken: account.appAccountToken)
    }

    /// The live session for a token, sliding its expiry; 1001 when unknown, expired or revoked.
    /// Blocks on SQLite briefly (an indexed read; a write at most once per touch interval).
    private func currentSession(_ token: String) throws(RPCError) -> SessionRow {
        // Not inline: nil is never answered.
        try currentSession(token, inline: false)!
    }

    /// The live session of a token, touched (`lastSeenAtMs`, sliding expiry) once per touch interval. `inline`
    /// (an event loop): read only without waiting, and never written; nil when that cannot answer (the caller
    /// goes where it may wait and write).
    private func currentSession(_ token: String, inline: Bool) throws(RPCError) -> SessionRow? {
        guard let hash = SessionTokens.hash(token) else { throw RPCError.unauthenticated() }
        let now = clock.nowMs
        let found: SessionRow?
        if inline {
            switch store.sessionWithoutWaiting(tokenHash: hash) {
            case .found(let row): found = row
            case .absent: found = nil
            case .notNow: return nil
            }
        } else {
            found = try runBlocking { try self.store.session(tokenHash: hash) }
        }
        guard let session = found else { throw RPCError.unauthenticated() }
        guard session.expiresAtMs > now, now - session.createdAtMs < configuration.sessionAbsoluteLifetimeMs else {
            throw RPCError(code: .unauthenticated, message: "session expired; sign in again", reason: "sessionExpired")
        }
        if now - session.lastSeenAtMs >= configuration.sessionTouchIntervalMs {
            if inline { return nil }
            let expires = sessionExpiry(createdAtMs: session.createdAtMs, nowMs: now)
            // Gone since it was read (revoked meanwhile, or a kept row that missed its revocation): refused.
            guard try runBlocking({ try self.store.touchSession(tokenHash: hash, nowMs: now, expiresAtMs: expires) }) else {
                throw RPCError.unauthenticated()
            }
            return SessionRow(
                tokenHash: session.tokenHash, accountId: session.accountId, username: session.username,
                appAccountToken: session.appAccountToken, deviceName: session.deviceName,
                createdAtMs: session.createdAtMs, lastSeenAtMs: now, expiresAtMs: expires)
        }
        return session
    }

    private func newSession(deviceName: String?, nowMs: Int64) -> (token: String, session: NewSession) {
        let token = SessionTokens.generate()
        return (
            token,
            NewSession(
                tokenHash: SessionTokens.hash(token)!, deviceName: deviceName,
                createdAtMs: nowMs, expiresAtMs: sessionExpiry(createdAtMs: nowMs, nowMs: nowMs))
        )
    }

    /// Sliding expiry, never past the absolute lifetime.
    private func sessionExpiry(createdAtMs: Int64, nowMs: Int64) -> Int64 {
        min(nowMs + configuration.sessionLifetimeMs, createdAtMs + configuration.sessionAbsoluteLifetimeMs)
    }

    /// Storage and hashing failures: a full hasher queue is `rateLimited`, anything else an internal error
    /// (logged, details not sent).
    private var storage: StorageCalls {
        StorageCalls(logger: logger) { error in
            error is PasswordHasher.Busy ? RPCError.rateLimited(retryAfterMs: 1_000, detail: "the server is busy checking passwords") : nil
        }
    }

    private func runBlocking<T>(_ body: () throws -> T) throws(RPCError) -> T { try storage.runBlocking(body) }

    func run<T>(_ body: () async throws -> T) async throws(RPCError) -> T { try await storage.run(body) }
}

/// Session tokens: 256 random bits, base64url, handed out once; only their SHA-256 is stored.
public enum SessionTokens {
    public static func generate() -> String {
        let key = SymmetricKey(size: .bits256)
        let bytes = key.withUnsafeBytes { Data($0) }
        return bytes.base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// The stored form of a token; nil for strings that cannot be one of ours.
    public static func hash(_ token: String) -> Data? {
        guard token.utf8.count == 43 else { return nil }
        return Data(SHA256.hash(data: Data(token.utf8)))
    }
}
