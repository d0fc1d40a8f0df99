import JSONRPC

// Extend Subscription Renewal Dates for All Active Subscribers (App Store Server API): one request extends every active
// subscriber of a product (an outage, a goodwill gesture); Apple carries it out afterwards, notifying each extension
// (RENEWAL_EXTENDED) and the counts at the end (RENEWAL_EXTENSION / SUMMARY), which fulfillment records.

/// Get Status of Subscription Renewal Date Extensions, Apple's fields (`completeDate` in ms).
public struct MassExtensionStatus: Codable, Sendable, Equatable {
    public var requestIdentifier: String
    public var complete: Bool
    public var completeDateMs: Int64?
    public var succeededCount: Int64?
    public var failedCount: Int64?
    public init(requestIdentifier: String, complete: Bool, completeDateMs: Int64? = nil, succeededCount: Int64? = nil, failedCount: Int64? = nil) {
        self.requestIdentifier = requestIdentifier
        self.complete = complete
        self.completeDateMs = completeDateMs
        self.succeededCount = succeededCount
        self.failedCount = failedCount
    }
}

/// Extend Subscription Renewal Dates for All Active Subscribers through the App Store Server API (internal token).
public enum VerificationMassExtendRenewalDate: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var internalToken: String
        public var environment: AppleEnvironment
        public var productId: String
        /// 1-90.
        public var extendByDays: Int
        /// Apple's code: 0 undeclared, 1 customer satisfaction, 2 other, 3 service issue or outage.
        public var extendReasonCode: Int
        /// A UUID; the same one again is the same request.
        public var requestIdentifier: String
        /// ISO 3166-1 alpha-3 storefront codes; absent: every storefront.
        public var storefrontCountryCodes: [String]?
        public init(
            internalToken: String, environment: AppleEnvironment, productId: String, extendByDays: Int, extendReasonCode: Int,
            requestIdentifier: String, storefrontCountryCodes: [String]? = nil
        ) {
            self.internalToken = internalToken
            self.environment = environment
            self.productId = productId
            self.extendByDays = extendByDays
            self.extendReasonCode = extendReasonCode
            self.requestIdentifier = requestIdentifier
            self.storefrontCountryCodes = storefrontCountryCodes
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var requestIdentifier: String
        public init(requestIdentifier: String) { self.requestIdentifier = requestIdentifier }
    }
    public static let name = "verification.massExtendRenewalDate"
    public static let access = RPCAccess.internal
    public static let summary = "Extend the renewal date of every active subscriber of a product at Apple (carried out afterwards)."
}

/// Get Status of Subscription Renewal Date Extensions (internal token).
public enum VerificationMassExtensionStatus: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var internalToken: String
        public var environment: AppleEnvironment
        public var productId: String
        public var requestIdentifier: String
        public init(internalToken: String, environment: AppleEnvironment, productId: String, requestIdentifier: String) {
            self.internalToken = internalToken
            self.environment = environment
            self.productId = productId
            self.requestIdentifier = requestIdentifier
        }
    }
    public typealias Result = MassExtensionStatus
    public static let name = "verification.massExtensionStatus"
    public static let access = RPCAccess.internal
    public static let summary = "Whether Apple has carried out a mass renewal extension, and its counts."
}

/// Admin: extends every active subscriber of a product at Apple (audited with the reason); fulfillment applies each
/// subscriber's new end as Apple notifies it, once, and records the summary.
public enum FulfillmentExtendAllSubscriptions: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var productId: String
        /// 1-90.
        public var days: Int
        /// Apple's code: 0 undeclared, 1 customer satisfaction, 2 other, 3 service issue or outage.
        public var reasonCode: Int
        /// Why, for the audit log (e.g. the incident).
        public var reason: String
        /// ISO 3166-1 alpha-3 storefront codes; absent: every storefront.
        public var storefrontCountryCodes: [String]?
        /// A UUID that makes a retry safe (the same request at Apple); a new one when absent.
        public var requestId: String?
        /// Apple's environment (default Production).
        public var environment: AppleEnvironment?
        public init(
            adminToken: String, productId: String, days: Int, reasonCode: Int, reason: String, storefrontCountryCodes: [String]? = nil,
            requestId: String? = nil, environment: AppleEnvironment? = nil
        ) {
            self.adminToken = adminToken
            self.productId = productId
            self.days = days
            self.reasonCode = reasonCode
            self.reason = reason
            self.storefrontCountryCodes = storefrontCountryCodes
            self.requestId = requestId
            self.environment = environment
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var requestIdentifier: String
        public var environment: AppleEnvironment
        public init(requestIdentifier: String, environment: AppleEnvironment) {
            self.requestIdentifier = requestIdentifier
            self.environment = environment
        }
    }
    public static let name = "fulfillment.extendAllSubscriptions"
    public static let access = RPCAccess.admin
    public static let summary = "Extend every active subscriber of a product at Apple (audited); applied here as Apple notifies each."
}

/// Admin: a mass extension's status at Apple and the summary recorded here once Apple sent it.
public enum FulfillmentMassExtensionStatus: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var productId: String
        public var requestIdentifier: String
        public var environment: AppleEnvironment?
        public init(adminToken: String, productId: String, requestIdentifier: String, environment: AppleEnvironment? = nil) {
            self.adminToken = adminToken
            self.productId = productId
            self.requestIdentifier = requestIdentifier
            self.environment = environment
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var atApple: MassExtensionStatus
        /// The RENEWAL_EXTENSION / SUMMARY notification's summary, once processed here.
        public var summary: AppleMassExtensionSummary?
        /// When it was processed here.
        public var summaryRecordedAtMs: Int64?
        public init(atApple: MassExtensionStatus, summary: AppleMassExtensionSummary? = nil, summaryRecordedAtMs: Int64? = nil) {
            self.atApple = atApple
            self.summary = summary
            self.summaryRecordedAtMs = summaryRecordedAtMs
        }
    }
    public static let name = "fulfillment.massExtensionStatus"
    public static let access = RPCAccess.admin
    public static let summary = "A mass renewal extension's status at Apple, and its summary as recorded here."
}
