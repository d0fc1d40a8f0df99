import Foundation
import IAPProtocol

// What accounts keeps, apart from how: the records and the storage protocol the SQLite `AccountsStore`
// implements (and a PostgreSQL store will). The rules that use them are `AccountsService`,
// `LoginThrottlePolicy` and the policies in Policies.swift.

/// What the accounts service needs from storage. Synchronous methods are the hot path (`authenticate`):
/// one indexed read each, called from the server's blocking pool.
public protocol AccountsStorage: Sendable {
    /// Creates the account and its first session in one transaction.
    func createAccount(_ account: AccountRow, usernameKey: String, session: NewSession, nowMs: Int64) async throws -> CreateOutcome
    func account(usernameKey: String) async throws -> AccountRow?
    func account(id: String) async throws -> AccountRow?
    func accountId(appAccountToken: String) async throws -> String?
    /// Replaces the hash if it is still `expected` (an upgrade after a login).
    func replacePasswordHash(accountId: String, expected: String, new: String) async throws
    /// Sets a new hash and revokes every other session, atomically; false if the hash changed meanwhile.
    func changePassword(accountId: String, expected: String, new: String, keepSession keep: Data) async throws -> Bool
    /// Adds a session, drops the account's expired ones, and evicts the oldest beyond `cap`, all only while the account's
    /// password hash is still `passwordHash` (the one the sign-in verified); false, nothing written, when it changed since
    /// (a password change that committed while the sign-in checked the old password must not leave it a session).
    func addSession(_ session: NewSession, accountId: String, passwordHash: String, nowMs: Int64, cap: Int) async throws -> Bool
    func session(tokenHash: Data) throws -> SessionRow?
    /// `session(tokenHash:)` for a caller on an event loop: answered only when that waits on nothing but memory and
    /// the local file (SQLite in WAL mode: a read takes no lock the writer holds; PostgreSQL: a session its cache
    /// kept) and nobody else is reading this way right now; `.notNow` otherwise (and on any failure: the caller then
    /// reads with `session(tokenHash:)`, which reports it).
    func sessionWithoutWaiting(tokenHash: Data) -> SessionReadWithoutWaiting
    /// Slides the session's expiry; false when it is gone or expired (revoked since it was read).
    func touchSession(tokenHash: Data, nowMs: Int64, expiresAtMs: Int64) throws -> Bool
    func deleteSession(tokenHash: Data) throws
    /// Ends every session of the account; answers how many.
    func deleteSessions(accountId: String) async throws -> Int
    func sessions(accountId: String, nowMs: Int64) throws -> [SessionRow]
    /// Refuses (answering the longest wait) or counts one attempt against every key, atomically.
    func admitAttempt(
        keys: [String], wait: @escaping @Sendable (String, ThrottleState?) -> Int64,
        record: @escaping @Sendable (String, ThrottleState?) -> ThrottleState
    ) async throws -> Int64
    /// Applies `update` to each key's state (nil when absent; a nil result deletes it) in one transaction.
    func updateThrottle(keys: [String], _ update: @escaping @Sendable (String, ThrottleState?) -> ThrottleState?) async throws
    /// Forgets counters whose window began before `windowEndedBeforeMs` and whose lock has ended at `nowMs`; then,
    /// if more than `maxRows` remain, the oldest windows first until `maxRows` do. Answers how many rows remain.
    func expireThrottle(windowEndedBeforeMs: Int64, nowMs: Int64, maxRows: Int) async throws -> Int
    /// Records whether the customer consents to consumption data being sent to Apple on a refund request.
    func setConsumptionConsent(accountId: String, consent: Bool) async throws
    /// Consent, account creation time and appAccountToken (for Send Consumption Information).
    func consumptionProfile(accountId: String) async throws -> (consent: Bool, createdAtMs: Int64, appAccountToken: String)?
    /// Links the account to the Apple customer of an app transaction; linking again changes nothing.
    func linkAppTransaction(accountId: String, appTransactionId: String, environment: String, nowMs: Int64) async throws
    /// With `accountId`: the links of every customer the account is linked to (its own links and other accounts'); with
    /// `appTransactionId`: that customer's links. Oldest first, at most 1,000 (the caps keep it below: 10 customers an account, 20 accounts a customer and environment).
    func appTransactionLinks(accountId: String?, appTransactionId: String?) async throws -> [AppTransactionLink]
    /// Closes the storage after the server has drained.
    func close() throws
}

public struct AccountRow: Sendable, Equatable {
    public let id: String
    public let username: String
    public let passwordHash: String
    public let appAccountToken: String
}

public enum CreateOutcome: Sendable { case created, usernameTaken }

public struct NewSession: Sendable {
    public let tokenHash: Data
    public let deviceName: String?
    public let createdAtMs: Int64
    public let expiresAtMs: Int64
}

/// What `sessionWithoutWaiting` found: the session, none, or nothing yet (ask `session(tokenHash:)` elsewhere).
public enum SessionReadWithoutWaiting: Sendable, Equatable {
    case found(SessionRow)
    case absent
    case notNow
}

public struct SessionRow: Sendable, Equatable {
    public let tokenHash: Data
    public let accountId: String
    public let username: String
    public let appAccountToken: String
    public let deviceName: String?
    public let createdAtMs: Int64
    public let lastSeenAtMs: Int64
    public let expiresAtMs: Int64
}

public struct ThrottleState: Sendable, Equatable {
    public var failures: Int
    public var windowStartMs: Int64
    public var lockedUntilMs: Int64
    public init(failures: Int, windowStartMs: Int64, lockedUntilMs: Int64) {
        self.failures = failures
        self.windowStartMs = windowStartMs
        self.lockedUntilMs = lockedUntilMs
    }
}
