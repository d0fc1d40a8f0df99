import AccountsService
import Foundation
import IAPProtocol

/// What an operator may do: viewers read, support also acts on customers, admins also manage operators and the catalog.
public enum OperatorRole: String, Sendable, CaseIterable, Codable {
    case viewer, support, admin

    /// May give or take coins, revoke, extend, retry: every action on a customer.
    public var mayAct: Bool { self != .viewer }
}

/// An operator as the console keeps it: the password as an scrypt hash, the TOTP secret, the last code's step (a code is
/// accepted once).
public struct OperatorRecord: Sendable, Equatable {
    public var name: String
    public var role: OperatorRole
    public var passwordHash: String
    public var totpSecret: [UInt8]
    public var lastTotpStep: Int64
    public var createdAtMs: Int64
    public init(name: String, role: OperatorRole, passwordHash: String, totpSecret: [UInt8], lastTotpStep: Int64 = 0, createdAtMs: Int64) {
        self.name = name
        self.role = role
        self.passwordHash = passwordHash
        self.totpSecret = totpSecret
        self.lastTotpStep = lastTotpStep
        self.createdAtMs = createdAtMs
    }

    /// Operator names: 1-64 letters, digits, `.`, `_`, `-`, `@` (what fulfillment's audit log accepts), kept lower case.
    public static func normalized(_ name: String) -> String? {
        guard OperatorName.isValid(name) else { return nil }
        return name.lowercased()
    }
}

/// A signed-in operator's session, found by the SHA-256 of its cookie's token.
public struct OperatorSession: Sendable, Equatable {
    public var operatorName: String
    public var role: OperatorRole
    /// Every form of the session carries it; a POST without it is refused.
    public var csrfToken: String
    public var expiresAtMs: Int64
}

/// One entry of the console's own audit log: sign-ins (and refusals), sign-outs, actions.
public struct ConsoleAuditEntry: Sendable, Equatable {
    public var id: Int64
    public var atMs: Int64
    public var operatorName: String
    public var action: String
    public var detail: String
    public var address: String?
}

public struct OperatorExists: Error, CustomStringConvertible {
    public let name: String
    public var description: String { "an operator named \(name) exists already" }
}

/// The console's own records: operators, sessions, sign-in throttle counters, its audit log. SQLite (`ConsoleStore`) by
/// default, PostgreSQL (`PostgresConsoleStore`) with `--database-url`.
public protocol ConsoleStorage: Sendable {
    func addOperator(_ record: OperatorRecord) async throws
    func operatorRecord(_ name: String) async throws -> OperatorRecord?
    /// Every operator, by name.
    func operators() async throws -> [OperatorRecord]
    /// A new role for an operator (every session of theirs ends: the next sign-in carries the new role); false: unknown.
    func setRole(_ name: String, role: OperatorRole) async throws -> Bool
    /// Removes an operator and every session of theirs (their audit entries stay); false: unknown.
    func removeOperator(_ name: String) async throws -> Bool
    /// Accepts a TOTP step for the operator only if it is later than the last one accepted (a code works once).
    func acceptTotpStep(_ name: String, step: Int64) async throws -> Bool
    /// A new session; sessions that have ended are deleted at the same time.
    func createSession(tokenHash: [UInt8], operatorName: String, csrfToken: String, nowMs: Int64, expiresAtMs: Int64) async throws
    /// The live session of a token hash; its expiry slides to `nowMs + idleMs`, never past `absoluteMs` after it began.
    func session(tokenHash: [UInt8], nowMs: Int64, idleMs: Int64, absoluteMs: Int64) async throws -> OperatorSession?
    func deleteSession(tokenHash: [UInt8]) async throws
    /// Signs the operator out everywhere; answers how many sessions ended.
    func deleteSessions(operatorName: String) async throws -> Int
    /// Counts an attempt on every key before the password is checked; answers how long to wait (0: go on).
    func admitAttempt(keys: [String], policy: LoginThrottlePolicy, nowMs: Int64) async throws -> Int64
    /// After a success: the name's counts cleared, the address's attempt given back.
    func signInSucceeded(nameKeys: [String], addressKey: String?, policy: LoginThrottlePolicy) async throws
    func recordAudit(operatorName: String, action: String, detail: String, address: String?, nowMs: Int64) async throws
    /// Newest first, optionally one operator's or one action's.
    func audit(operatorName: String?, action: String?, limit: Int) async throws -> [ConsoleAuditEntry]
    func close() throws
}
