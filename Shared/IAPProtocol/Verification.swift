import JSONRPC

// verification.* — receipts and signed transactions, checked locally (docs/contract.md, docs/receipts.md).

public enum VerificationMode: String, Codable, Sendable, JSONSchemaEnum {
    case local, remote, auto
}

public enum VerificationVerifyReceipt: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        /// Base64 of the PKCS#7 receipt file.
        public var receiptData: String
        public var expectedBundleId: String?
        /// iOS: identifierForVendor as a UUID string; macOS: the MAC address as hex or base64.
        public var deviceIdentifier: String?
        public var mode: VerificationMode?
        public init(receiptData: String, expectedBundleId: String? = nil, deviceIdentifier: String? = nil, mode: VerificationMode? = nil) {
            self.receiptData = receiptData
            self.expectedBundleId = expectedBundleId
            self.deviceIdentifier = deviceIdentifier
            self.mode = mode
        }
    }
    public typealias Result = VerifyReceiptResponse
    public static let name = "verification.verifyReceipt"
    public static let summary = "Verify an app receipt; answers a verifyReceipt-compatible object (status 0 when valid)."
}

/// Apple's verifyReceipt response shape (docs/receipts.md, "The verifyReceipt answer"), plus a machine-readable `reason`.
public struct VerifyReceiptResponse: Codable, Sendable, Equatable {
    public var status: Int
    public var reason: String?
    public var environment: String?
    public var receipt: ReceiptBody?
    public init(status: Int, reason: String? = nil, environment: String? = nil, receipt: ReceiptBody? = nil) {
        self.status = status
        self.reason = reason
        self.environment = environment
        self.receipt = receipt
    }
}

/// The `receipt` object of a verifyReceipt answer, with Apple's key names. Like Apple, every value is
/// a string; dates come as `2020-07-22 17:39:08 Etc/GMT` and as millisecond strings (`_ms`).
public struct ReceiptBody: Codable, Sendable, Equatable {
    public var receiptType: String?
    public var appItemId: String?
    public var bundleId: String
    public var applicationVersion: String?
    public var originalApplicationVersion: String?
    public var receiptCreationDate: String?
    public var receiptCreationDateMs: String?
    public var originalPurchaseDate: String?
    public var originalPurchaseDateMs: String?
    public var expirationDate: String?
    public var expirationDateMs: String?
    public var inApp: [InAppPurchase]

    enum CodingKeys: String, CodingKey {
        case receiptType = "receipt_type", appItemId = "app_item_id", bundleId = "bundle_id"
        case applicationVersion = "application_version", originalApplicationVersion = "original_application_version"
        case receiptCreationDate = "receipt_creation_date", receiptCreationDateMs = "receipt_creation_date_ms"
        case originalPurchaseDate = "original_purchase_date", originalPurchaseDateMs = "original_purchase_date_ms"
        case expirationDate = "expiration_date", expirationDateMs = "expiration_date_ms"
        case inApp = "in_app"
    }

    public init(bundleId: String, inApp: [InAppPurchase]) {
        self.bundleId = bundleId
        self.inApp = inApp
    }
}

/// One `in_app[]` entry with Apple's key names and string values.
public struct InAppPurchase: Codable, Sendable, Equatable {
    public var quantity: String
    public var productId: String
    public var transactionId: String
    public var originalTransactionId: String?
    public var purchaseDate: String?
    public var purchaseDateMs: String?
    public var originalPurchaseDate: String?
    public var originalPurchaseDateMs: String?
    public var expiresDate: String?
    public var expiresDateMs: String?
    public var cancellationDate: String?
    public var cancellationDateMs: String?
    public var webOrderLineItemId: String?
    public var isTrialPeriod: String?
    public var isInIntroOfferPeriod: String?
    public var promotionalOfferId: String?
    /// Not an Apple key: the receipt's undocumented product type field 1707 (0 non-consumable,
    /// 1 consumable, 2 non-renewing, 3 auto-renewable), when present.
    public var productType: String?

    enum CodingKeys: String, CodingKey {
        case quantity, productId = "product_id", transactionId = "transaction_id"
        case originalTransactionId = "original_transaction_id"
        case purchaseDate = "purchase_date", purchaseDateMs = "purchase_date_ms"
        case originalPurchaseDate = "original_purchase_date", originalPurchaseDateMs = "original_purchase_date_ms"
        case expiresDate = "expires_date", expiresDateMs = "expires_date_ms"
        case cancellationDate = "cancellation_date", cancellationDateMs = "cancellation_date_ms"
        case webOrderLineItemId = "web_order_line_item_id", isTrialPeriod = "is_trial_period"
        case isInIntroOfferPeriod = "is_in_intro_offer_period", promotionalOfferId = "promotional_offer_id"
        case productType = "x_product_type"
    }

    public init(quantity: String, productId: String, transactionId: String) {
        self.quantity = quantity
        self.productId = productId
        self.transactionId = transactionId
    }
}

public enum VerificationVerifyTransaction: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        /// A StoreKit 2 JWS (compact serialization).
        public var signedTransaction: String
        public var expectedBundleId: String?
        public init(signedTransaction: String, expectedBundleId: String? = nil) {
            self.signedTransaction = signedTransaction
            self.expectedBundleId = expectedBundleId
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var status: Int
        public var reason: String?
        public var environment: String?
        /// The decoded JWS payload with Apple's field names.
        public var transaction: JSONValue?
        public init(status: Int, reason: String? = nil, environment: String? = nil, transaction: JSONValue? = nil) {
            self.status = status
            self.reason = reason
            self.environment = environment
            self.transaction = transaction
        }
    }
    public static let name = "verification.verifyTransaction"
    public static let summary = "Verify a StoreKit 2 signed transaction (ES256, x5c chain to a pinned root)."
}

public enum VerificationVerifyNotification: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var signedPayload: String
        public init(signedPayload: String) { self.signedPayload = signedPayload }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var status: Int
        public var reason: String?
        public var notification: JSONValue?
        public init(status: Int, reason: String? = nil, notification: JSONValue? = nil) {
            self.status = status
            self.reason = reason
            self.notification = notification
        }
    }
    public static let name = "verification.verifyNotification"
    public static let summary = "Verify an App Store Server Notification v2 signed payload."
}

/// Get Transaction Info through the App Store Server API (internal token): the transaction, verified as
/// `verifyTransaction` verifies a JWS.
public enum VerificationTransactionInfo: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var internalToken: String
        public var transactionId: String
        public init(internalToken: String, transactionId: String) {
            self.internalToken = internalToken
            self.transactionId = transactionId
        }
    }
    public typealias Result = VerificationVerifyTransaction.Result
    public static let name = "verification.transactionInfo"
    public static let access = RPCAccess.internal
    public static let summary = "Fetch one transaction from Apple (App Store Server API) and verify it."
}

/// Get Transaction History through the App Store Server API (internal token): every page, every
/// transaction verified; at most `VerificationTransactionHistory.maxTransactions`.
public enum VerificationTransactionHistory: RPCMethod {
    /// Any transaction id of the customer.
    public typealias Params = VerificationTransactionInfo.Params
    public struct Result: Codable, Sendable, Equatable {
        public var transactions: [VerificationVerifyTransaction.Result]
        public init(transactions: [VerificationVerifyTransaction.Result]) { self.transactions = transactions }
    }
    public static let maxTransactions = 5_000
    public static let name = "verification.transactionHistory"
    public static let access = RPCAccess.internal
    public static let summary = "Fetch a customer's whole transaction history from Apple (App Store Server API), each verified."
}

/// Look Up Order ID through the App Store Server API (internal token): the transactions of the order on a
/// customer's emailed receipt, each verified; none when Apple says the order id is invalid.
public enum VerificationLookUpOrder: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var internalToken: String
        public var orderId: String
        public init(internalToken: String, orderId: String) {
            self.internalToken = internalToken
            self.orderId = orderId
        }
    }
    public typealias Result = VerificationTransactionHistory.Result
    public static let name = "verification.lookUpOrder"
    public static let access = RPCAccess.internal
    public static let summary = "Find an order's transactions at Apple (App Store Server API) by the id on the customer's receipt."
}
