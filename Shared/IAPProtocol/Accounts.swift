import JSONRPC

// accounts.* — users, password login, sessions, appAccountToken (docs/contract.md).

public struct SessionToken: Codable, Sendable, Equatable {
    public var token: String
    public var expiresAtMs: Int64
    public init(token: String, expiresAtMs: Int64) { self.token = token; self.expiresAtMs = expiresAtMs }

    /// `bytes` as a string when they have a session token's shape (43 base64url characters, what accounts hands out),
    /// else nil: the key that sends a session's calls to one instance (`RPCClient` affinity). Anything else (a guess, an
    /// escaped form) goes round-robin, so nobody can pile calls that accounts will refuse onto one instance.
    public static func shaped(_ bytes: some Collection<UInt8>) -> String? {
        guard bytes.count == 43,
            bytes.allSatisfy({ (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) || $0 == 0x2D || $0 == 0x5F })
        else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }
}

public struct Credentials: Codable, Sendable, Equatable {
    public var username: String
    public var password: String
    public var deviceName: String?
    /// Set by the edge only: the app's address, which the sign-in and registration limits then key on
    /// (instead of the edge's own). Needs `internalToken`; refused without it.
    public var clientAddress: String?
    public var internalToken: String?
    public init(username: String, password: String, deviceName: String? = nil, clientAddress: String? = nil, internalToken: String? = nil) {
        self.username = username
        self.password = password
        self.deviceName = deviceName
        self.clientAddress = clientAddress
        self.internalToken = internalToken
    }
}

public struct SignedIn: Codable, Sendable, Equatable {
    public var accountId: String
    public var appAccountToken: String
    public var session: SessionToken
    public init(accountId: String, appAccountToken: String, session: SessionToken) {
        self.accountId = accountId
        self.appAccountToken = appAccountToken
        self.session = session
    }
}

public struct SessionParams: Codable, Sendable, Equatable {
    public var session: String
    public init(session: String) { self.session = session }
}

public enum AccountsRegister: RPCMethod {
    public typealias Params = Credentials
    public typealias Result = SignedIn
    public static let name = "accounts.register"
    public static let summary = "Create an account and sign in; returns the session token once."
}

public enum AccountsLogin: RPCMethod {
    public typealias Params = Credentials
    public typealias Result = SignedIn
    public static let name = "accounts.login"
    public static let summary = "Sign in with username and password; returns a new session token."
}

public enum AccountsLogout: RPCMethod {
    public typealias Params = SessionParams
    public typealias Result = EmptyResult
    public static let name = "accounts.logout"
    public static let summary = "Revoke this session."
}

public enum AccountsAuthenticate: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var session: String
        /// The suite's internal token: only the services ask (an open port answers nobody else).
        public var internalToken: String?
        public init(session: String, internalToken: String?) {
            self.session = session
            self.internalToken = internalToken
        }
    }
    public typealias Result = AuthenticatedAccount
    public static let name = "accounts.authenticate"
    public static let summary = "Resolve a session token to its account (what other services call on every request)."
    /// Other services' question; apps have `fulfillment.getEntitlements` and `accounts.listSessions`.
    public static let access = RPCAccess.internal
}

public struct AuthenticatedAccount: Codable, Sendable, Equatable {
    public var accountId: String
    public var username: String
    public var appAccountToken: String
    public var expiresAtMs: Int64
    public init(accountId: String, username: String, appAccountToken: String, expiresAtMs: Int64) {
        self.accountId = accountId
        self.username = username
        self.appAccountToken = appAccountToken
        self.expiresAtMs = expiresAtMs
    }
}

public enum AccountsChangePassword: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var session: String
        public var currentPassword: String
        public var newPassword: String
        public init(session: String, currentPassword: String, newPassword: String) {
            self.session = session
            self.currentPassword = currentPassword
            self.newPassword = newPassword
        }
    }
    public typealias Result = EmptyResult
    public static let name = "accounts.changePassword"
    public static let summary = "Change the password; revokes every other session of the account."
}

public enum AccountsListSessions: RPCMethod {
    public typealias Params = SessionParams
    public struct Result: Codable, Sendable, Equatable {
        public var sessions: [SessionInfo]
        public init(sessions: [SessionInfo]) { self.sessions = sessions }
    }
    public static let name = "accounts.listSessions"
    public static let summary = "The account's open sessions, per device name."
}

public struct SessionInfo: Codable, Sendable, Equatable {
    public var deviceName: String?
    public var createdAtMs: Int64
    public var lastSeenAtMs: Int64
    public var current: Bool
    public init(deviceName: String?, createdAtMs: Int64, lastSeenAtMs: Int64, current: Bool) {
        self.deviceName = deviceName
        self.createdAtMs = createdAtMs
        self.lastSeenAtMs = lastSeenAtMs
        self.current = current
    }
}

public enum AccountsFindByAppAccountToken: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var appAccountToken: String
        /// The suite's internal service token.
        public var internalToken: String
        public init(appAccountToken: String, internalToken: String) {
            self.appAccountToken = appAccountToken
            self.internalToken = internalToken
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var accountId: String
        public init(accountId: String) { self.accountId = accountId }
    }
    public static let name = "accounts.findByAppAccountToken"
    public static let summary = "Internal: the account that owns an appAccountToken."
    public static let access = RPCAccess.internal
}

/// Internal: an account by its username (support tools resolve "grant this order to USERNAME" with it).
public enum AccountsFindByUsername: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var username: String
        /// The suite's internal service token.
        public var internalToken: String
        public init(username: String, internalToken: String) {
            self.username = username
            self.internalToken = internalToken
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var accountId: String
        public var appAccountToken: String
        public init(accountId: String, appAccountToken: String) {
            self.accountId = accountId
            self.appAccountToken = appAccountToken
        }
    }
    public static let name = "accounts.findByUsername"
    public static let summary = "Internal: the account id and appAccountToken of a username."
    public static let access = RPCAccess.internal
}

/// The customer's choice: may data about how they used a purchase (was it delivered, how much was
/// consumed, account age) be sent to Apple when they ask Apple for a refund? Off until they turn it on.
public enum AccountsSetConsumptionConsent: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var session: String
        public var consent: Bool
        public init(session: String, consent: Bool) {
            self.session = session
            self.consent = consent
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var consent: Bool
        public init(consent: Bool) { self.consent = consent }
    }
    public static let name = "accounts.setConsumptionConsent"
    public static let summary = "Allow (or stop) sending consumption data to Apple when you ask Apple for a refund."
}

/// Internal: what fulfillment needs to answer Apple's consumption request for an account's purchase.
public enum AccountsConsumptionProfile: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var accountId: String
        public var internalToken: String
        public init(accountId: String, internalToken: String) {
            self.accountId = accountId
            self.internalToken = internalToken
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var consent: Bool
        public var createdAtMs: Int64
        public var appAccountToken: String
        public init(consent: Bool, createdAtMs: Int64, appAccountToken: String) {
            self.consent = consent
            self.createdAtMs = createdAtMs
            self.appAccountToken = appAccountToken
        }
    }
    public static let name = "accounts.consumptionProfile"
    public static let summary = "Internal: an account's consumption-data consent, age and appAccountToken."
    public static let access = RPCAccess.internal
}
