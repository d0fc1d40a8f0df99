import JSONRPC

// The app transaction: StoreKit's signed record that an Apple Account has this app (one `appTransactionId` per Apple
// Account and app, and per family member; the same on every device and after a refund or a redownload). The app sends
// its AppTransaction after signing in; accounts links the account to that Apple customer, and offers are decided for
// the customer, not the account. The methods of every service that deal with it are here.

/// A verified app transaction (`JWSAppTransactionDecodedPayload`): the fields this suite acts on.
public struct AppleAppTransaction: Sendable, Equatable {
    public var appTransactionId: String
    public var bundleId: String?
    /// Apple's `receiptType`: `Production`, `Sandbox`, `Xcode`.
    public var environment: String?
    public var appAppleId: Int64?
    /// `iOS`, `macOS`, `tvOS`, `visionOS`.
    public var originalPlatform: String?
    public var originalApplicationVersion: String?
    public var originalPurchaseDateMs: Int64?
    /// Set when the customer pre-ordered the app.
    public var preorderDateMs: Int64?
    /// When the App Store signed it.
    public var receiptCreationDateMs: Int64?

    /// Nil without an app transaction id.
    public init?(_ payload: JSONValue) {
        guard let id = AppleTransaction.id(payload["appTransactionId"]), !id.isEmpty else { return nil }
        appTransactionId = id
        bundleId = payload["bundleId"]?.stringValue
        environment = payload["receiptType"]?.stringValue
        appAppleId = payload["appAppleId"]?.intValue
        originalPlatform = payload["originalPlatform"]?.stringValue
        originalApplicationVersion = payload["originalApplicationVersion"]?.stringValue
        originalPurchaseDateMs = payload["originalPurchaseDate"]?.millisecondsValue
        preorderDateMs = payload["preorderDate"]?.millisecondsValue
        receiptCreationDateMs = payload["receiptCreationDate"]?.millisecondsValue
    }
}

/// StoreKit's signed AppTransaction, verified as a transaction is (ES256, x5c chain to a pinned root, this app's
/// bundle id, a known environment; Xcode only when allowed).
public enum VerificationVerifyAppTransaction: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        /// `AppTransaction.shared`'s `jwsRepresentation`.
        public var signedAppTransaction: String
        public var expectedBundleId: String?
        public init(signedAppTransaction: String, expectedBundleId: String? = nil) {
            self.signedAppTransaction = signedAppTransaction
            self.expectedBundleId = expectedBundleId
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// 0 verified; otherwise the failure's status, as `verifyTransaction`'s.
        public var status: Int
        public var reason: String?
        /// `Production`, `Sandbox` or `Xcode` (the payload's `receiptType`).
        public var environment: String?
        /// The decoded payload with Apple's field names.
        public var appTransaction: JSONValue?
        public init(status: Int, reason: String? = nil, environment: String? = nil, appTransaction: JSONValue? = nil) {
            self.status = status
            self.reason = reason
            self.environment = environment
            self.appTransaction = appTransaction
        }
    }
    public static let name = "verification.verifyAppTransaction"
    public static let summary = "Verify StoreKit's signed AppTransaction (ES256, x5c chain to a pinned root, bundle id, environment)."
}

/// Get App Transaction Info through the App Store Server API (internal token): the app transaction of the customer
/// any of whose transaction ids (or their appTransactionId) is given, verified as `verifyAppTransaction` verifies one.
public enum VerificationAppTransactionInfo: RPCMethod {
    /// `{internalToken, transactionId}` (a transactionId, originalTransactionId or appTransactionId of the customer), as
    /// Get Transaction Info's.
    public typealias Params = VerificationTransactionInfo.Params
    public typealias Result = VerificationVerifyAppTransaction.Result
    public static let name = "verification.appTransactionInfo"
    public static let access = RPCAccess.internal
    public static let summary = "Fetch a customer's app transaction from Apple (App Store Server API) and verify it."
}

/// The app, signed in, sends its AppTransaction: the account is linked to that Apple customer (several accounts may be
/// linked to one customer, and one account to several, e.g. a family's devices). Linking again changes nothing.
public enum AccountsLinkAppTransaction: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var session: String
        /// `AppTransaction.shared`'s `jwsRepresentation`.
        public var signedAppTransaction: String
        public init(session: String, signedAppTransaction: String) {
            self.session = session
            self.signedAppTransaction = signedAppTransaction
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var appTransactionId: String
        public init(appTransactionId: String) { self.appTransactionId = appTransactionId }
    }
    public static let name = "accounts.linkAppTransaction"
    public static let summary = "Link your account to the Apple customer of this device's signed AppTransaction."
}

/// One link between an account and an Apple customer.
public struct AppTransactionLink: Codable, Sendable, Equatable {
    public var accountId: String
    public var username: String
    public var appTransactionId: String
    /// `Production` or `Sandbox` (or `Xcode`).
    public var environment: String
    public var linkedAtMs: Int64
    public init(accountId: String, username: String, appTransactionId: String, environment: String, linkedAtMs: Int64) {
        self.accountId = accountId
        self.username = username
        self.appTransactionId = appTransactionId
        self.environment = environment
        self.linkedAtMs = linkedAtMs
    }
}

/// Internal: the Apple customer behind an account, or the accounts of an Apple customer. Given `accountId`: the
/// account's links, and every link of the customers it is linked to (so every account of each customer). Given
/// `appTransactionId`: that customer's links. Offers are decided from it; support looks customers up with it.
public enum AccountsAppleCustomer: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var internalToken: String
        public var accountId: String?
        public var appTransactionId: String?
        public init(internalToken: String, accountId: String? = nil, appTransactionId: String? = nil) {
            self.internalToken = internalToken
            self.accountId = accountId
            self.appTransactionId = appTransactionId
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// Oldest first; empty when the account is linked to no customer (or nobody is linked to the customer).
        public var links: [AppTransactionLink]
        public init(links: [AppTransactionLink]) { self.links = links }
    }
    public static let name = "accounts.appleCustomer"
    public static let summary = "Internal: the Apple customers (app transactions) linked to an account, and every account linked to them."
    public static let access = RPCAccess.internal
}

/// The app transaction of an Apple ID, as StoreKit's `AppTransaction.shared` hands it to the app on a device (made on
/// first use, or by the first purchase; the same id for that Apple ID and app ever after).
public enum SimAppTransaction: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var appleId: String
        public var bundleId: String
        public var environment: SimEnvironment?
        public init(appleId: String, bundleId: String, environment: SimEnvironment? = nil) {
            self.appleId = appleId
            self.bundleId = bundleId
            self.environment = environment
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var appTransactionId: String
        /// The JWS the app sends to its server (`jwsRepresentation`).
        public var signedAppTransaction: String
        public init(appTransactionId: String, signedAppTransaction: String) {
            self.appTransactionId = appTransactionId
            self.signedAppTransaction = signedAppTransaction
        }
    }
    public static let name = "sim.appTransaction"
    public static let summary = "The signed AppTransaction of an Apple ID for an app (StoreKit's AppTransaction.shared)."
}
