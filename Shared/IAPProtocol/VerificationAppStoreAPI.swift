import JSONRPC

// verification.* methods over Apple's App Store Server API (internal token; docs/contract.md). Every
// answer carries payloads the App Store Server API client verified (chain to a trusted root, signature,
// this app's bundle id); the signed originals come along for whoever must store or forward them.

/// Which of Apple's hosts a call without a transaction id goes to.
public enum AppleEnvironment: String, Codable, Sendable, JSONSchemaEnum {
    case production = "Production"
    case sandbox = "Sandbox"
}

/// One subscription from Get All Subscription Statuses.
public struct AppleSubscriptionStatus: Codable, Sendable, Equatable {
    public var subscriptionGroupIdentifier: String
    /// Apple's status: 1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked.
    public var status: Int
    public var originalTransactionId: String
    /// The latest transaction's verified payload.
    public var transaction: JSONValue
    /// The verified renewal info (autoRenewStatus, isInBillingRetryPeriod, gracePeriodExpiresDate, ...).
    public var renewalInfo: JSONValue
    public var signedTransactionInfo: String
    public var signedRenewalInfo: String
    public init(
        subscriptionGroupIdentifier: String, status: Int, originalTransactionId: String, transaction: JSONValue, renewalInfo: JSONValue,
        signedTransactionInfo: String, signedRenewalInfo: String
    ) {
        self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
        self.status = status
        self.originalTransactionId = originalTransactionId
        self.transaction = transaction
        self.renewalInfo = renewalInfo
        self.signedTransactionInfo = signedTransactionInfo
        self.signedRenewalInfo = signedRenewalInfo
    }
}

public enum VerificationSubscriptionStatuses: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var internalToken: String
        /// Any transaction id of the customer.
        public var transactionId: String
        /// Only subscriptions with these statuses (1-5); all when absent.
        public var statuses: [Int]?
        public init(internalToken: String, transactionId: String, statuses: [Int]? = nil) {
            self.internalToken = internalToken
            self.transactionId = transactionId
            self.statuses = statuses
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var subscriptions: [AppleSubscriptionStatus]
        public init(subscriptions: [AppleSubscriptionStatus]) { self.subscriptions = subscriptions }
    }
    public static let name = "verification.subscriptionStatuses"
    public static let access = RPCAccess.internal
    public static let summary = "Every subscription of a customer with its status and renewal info, from Apple (Get All Subscription Statuses)."
}

public enum VerificationRefundHistory: RPCMethod {
    public typealias Params = VerificationTransactionInfo.Params
    public typealias Result = VerificationTransactionHistory.Result
    public static let name = "verification.refundHistory"
    public static let access = RPCAccess.internal
    public static let summary = "Every refunded transaction of a customer, from Apple (Get Refund History), each verified."
}

/// One send attempt of a notification.
public struct AppleSendAttempt: Codable, Sendable, Equatable {
    public var attemptDateMs: Int64
    /// Apple's sendAttemptResult: SUCCESS, TIMED_OUT, TLS_ISSUE, NO_RESPONSE, UNSUCCESSFUL_HTTP_RESPONSE_CODE, ...
    public var result: String
    public init(attemptDateMs: Int64, result: String) {
        self.attemptDateMs = attemptDateMs
        self.result = result
    }
}

/// A notification Apple sent or tried to send, verified, with its send attempts.
public struct AppleNotificationRecord: Codable, Sendable, Equatable {
    public var notificationUUID: String?
    public var notificationType: String?
    public var subtype: String?
    public var signedDateMs: Int64?
    /// As Apple signed it: what the webhook would have received (`fulfillment.receiveNotification` takes it).
    public var signedPayload: String
    public var sendAttempts: [AppleSendAttempt]
    public init(
        notificationUUID: String?, notificationType: String?, subtype: String?, signedDateMs: Int64?, signedPayload: String,
        sendAttempts: [AppleSendAttempt]
    ) {
        self.notificationUUID = notificationUUID
        self.notificationType = notificationType
        self.subtype = subtype
        self.signedDateMs = signedDateMs
        self.signedPayload = signedPayload
        self.sendAttempts = sendAttempts
    }
}

public enum VerificationNotificationHistory: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var internalToken: String
        public var environment: AppleEnvironment
        public var startDateMs: Int64
        public var endDateMs: Int64
        public var notificationType: String?
        public var notificationSubtype: String?
        /// Notifications about this customer's purchase (not with `notificationType`).
        public var transactionId: String?
        /// Only notifications that never reached this server.
        public var onlyFailures: Bool?
        /// The `paginationToken` of the previous page.
        public var paginationToken: String?
        public init(
            internalToken: String, environment: AppleEnvironment, startDateMs: Int64, endDateMs: Int64, notificationType: String? = nil,
            notificationSubtype: String? = nil, transactionId: String? = nil, onlyFailures: Bool? = nil, paginationToken: String? = nil
        ) {
            self.internalToken = internalToken
            self.environment = environment
            self.startDateMs = startDateMs
            self.endDateMs = endDateMs
            self.notificationType = notificationType
            self.notificationSubtype = notificationSubtype
            self.transactionId = transactionId
            self.onlyFailures = onlyFailures
            self.paginationToken = paginationToken
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var notifications: [AppleNotificationRecord]
        public var hasMore: Bool
        /// Where the next page starts (store it as a checkpoint).
        public var paginationToken: String?
        public init(notifications: [AppleNotificationRecord], hasMore: Bool, paginationToken: String? = nil) {
            self.notifications = notifications
            self.hasMore = hasMore
            self.paginationToken = paginationToken
        }
    }
    public static let name = "verification.notificationHistory"
    public static let access = RPCAccess.internal
    public static let summary = "One page of the notifications Apple sent in a date range, with send attempts (Get Notification History)."
}

public struct AppleEnvironmentParams: Codable, Sendable, Equatable {
    public var internalToken: String
    public var environment: AppleEnvironment
    public init(internalToken: String, environment: AppleEnvironment) {
        self.internalToken = internalToken
        self.environment = environment
    }
}

public enum VerificationRequestTestNotification: RPCMethod {
    public typealias Params = AppleEnvironmentParams
    public struct Result: Codable, Sendable, Equatable {
        public var testNotificationToken: String
        public init(testNotificationToken: String) { self.testNotificationToken = testNotificationToken }
    }
    public static let name = "verification.requestTestNotification"
    public static let access = RPCAccess.internal
    public static let summary = "Ask Apple to send a TEST notification to this deployment's notification URL."
}

public enum VerificationTestNotificationStatus: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var internalToken: String
        public var environment: AppleEnvironment
        public var testNotificationToken: String
        public init(internalToken: String, environment: AppleEnvironment, testNotificationToken: String) {
            self.internalToken = internalToken
            self.environment = environment
            self.testNotificationToken = testNotificationToken
        }
    }
    public typealias Result = AppleNotificationRecord
    public static let name = "verification.testNotificationStatus"
    public static let access = RPCAccess.internal
    public static let summary = "The TEST notification Apple sent for a token and how its delivery went."
}

/// Apple's ConsumptionRequest (Send Consumption Information, App Store Server API 1.19): what the developer tells Apple
/// about a purchase whose refund the customer asked for, with Apple's field names and values. Only with the customer's
/// consent (`customerConsented` must be true).
public struct AppleConsumptionRequest: Codable, Sendable, Equatable {
    public enum DeliveryStatus: String, Codable, Sendable, JSONSchemaEnum {
        case delivered = "DELIVERED"
        case undeliveredQualityIssue = "UNDELIVERED_QUALITY_ISSUE"
        case undeliveredWrongItem = "UNDELIVERED_WRONG_ITEM"
        case undeliveredServerOutage = "UNDELIVERED_SERVER_OUTAGE"
        case undeliveredOther = "UNDELIVERED_OTHER"
    }
    public enum RefundPreference: String, Codable, Sendable, JSONSchemaEnum {
        case decline = "DECLINE"
        case grantFull = "GRANT_FULL"
        case grantProrated = "GRANT_PRORATED"
    }
    public var customerConsented: Bool
    public var deliveryStatus: DeliveryStatus
    public var sampleContentProvided: Bool
    /// How much of the purchase the customer consumed, in milliunits (100000: all of it). Never for an auto-renewable
    /// subscription; 0 unless delivered.
    public var consumptionPercentage: Int?
    public var refundPreference: RefundPreference?
    public init(
        customerConsented: Bool, deliveryStatus: DeliveryStatus, sampleContentProvided: Bool, consumptionPercentage: Int? = nil,
        refundPreference: RefundPreference? = nil
    ) {
        self.customerConsented = customerConsented
        self.deliveryStatus = deliveryStatus
        self.sampleContentProvided = sampleContentProvided
        self.consumptionPercentage = consumptionPercentage
        self.refundPreference = refundPreference
    }
}

public enum VerificationSendConsumption: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var internalToken: String
        public var transactionId: String
        public var consumption: AppleConsumptionRequest
        public init(internalToken: String, transactionId: String, consumption: AppleConsumptionRequest) {
            self.internalToken = internalToken
            self.transactionId = transactionId
            self.consumption = consumption
        }
    }
    public typealias Result = EmptyResult
    public static let name = "verification.sendConsumption"
    public static let access = RPCAccess.internal
    public static let summary = "Answer Apple's consumption request for a refund (Send Consumption Information, v2)."
}

public enum VerificationFinishTransaction: RPCMethod {
    /// `{internalToken, transactionId}`, as Get Transaction Info's.
    public typealias Params = VerificationTransactionInfo.Params
    public typealias Result = EmptyResult
    public static let name = "verification.finishTransaction"
    public static let access = RPCAccess.internal
    public static let summary =
        "Mark a transaction finished at Apple once its content is delivered, so the device stops delivering it again (Finish Transaction)."
}

public enum VerificationSetAppAccountToken: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var internalToken: String
        public var originalTransactionId: String
        /// The account's UUID.
        public var appAccountToken: String
        public init(internalToken: String, originalTransactionId: String, appAccountToken: String) {
            self.internalToken = internalToken
            self.originalTransactionId = originalTransactionId
            self.appAccountToken = appAccountToken
        }
    }
    public typealias Result = EmptyResult
    public static let name = "verification.setAppAccountToken"
    public static let access = RPCAccess.internal
    public static let summary = "Tie a purchase to an account at Apple, so its later notifications name the account (Set App Account Token)."
}

public enum VerificationExtendRenewalDate: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var internalToken: String
        public var originalTransactionId: String
        /// 1-90.
        public var extendByDays: Int
        /// 0 undeclared, 1 customer satisfaction, 2 other, 3 service issue or outage.
        public var extendReasonCode: Int
        /// Unique per request; a retry with the same one is not extended twice.
        public var requestIdentifier: String
        public init(internalToken: String, originalTransactionId: String, extendByDays: Int, extendReasonCode: Int, requestIdentifier: String) {
            self.internalToken = internalToken
            self.originalTransactionId = originalTransactionId
            self.extendByDays = extendByDays
            self.extendReasonCode = extendReasonCode
            self.requestIdentifier = requestIdentifier
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var originalTransactionId: String
        public var webOrderLineItemId: String
        public var success: Bool
        /// The subscription's new renewal date.
        public var effectiveDateMs: Int64?
        public init(originalTransactionId: String, webOrderLineItemId: String, success: Bool, effectiveDateMs: Int64?) {
            self.originalTransactionId = originalTransactionId
            self.webOrderLineItemId = webOrderLineItemId
            self.success = success
            self.effectiveDateMs = effectiveDateMs
        }
    }
    public static let name = "verification.extendRenewalDate"
    public static let access = RPCAccess.internal
    public static let summary = "Move a subscription's renewal date later at Apple (Extend a Subscription Renewal Date)."
}
