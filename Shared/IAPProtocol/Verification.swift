import JSONRPC

// verification.* — receipts and signed transactions, checked locally (DESIGN.md section 3, RECEIPTS.md).

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
            self.receiptData = receiptData; self.expectedBundleId = expectedBundleId
            self.deviceIdentifier = deviceIdentifier; self.mode = mode
        }
    }
    public typealias Result = VerifyReceiptResponse
    public static let name = "verification.verifyReceipt"
    public static let summary = "Verify an app receipt; answers a verifyReceipt-compatible object (status 0 when valid)."
}

/// Apple's verifyReceipt response shape (RECEIPTS.md section 3), plus a machine-readable `reason`.
public struct VerifyReceiptResponse: Codable, Sendable, Equatable {
    public var status: Int
    public var reason: String?
    public var environment: String?
    public var receipt: ReceiptBody?
    public init(status: Int, reason: String? = nil, environment: String? = nil, receipt: ReceiptBody? = nil) {
        self.status = status; self.reason = reason; self.environment = environment; self.receipt = receipt
    }
}

public struct ReceiptBody: Codable, Sendable, Equatable {
    public var receiptType: String?
    public var bundleId: String
    public var applicationVersion: String?
    public var originalApplicationVersion: String?
    public var receiptCreationDateMs: String?
    public var inApp: [InAppPurchase]

    enum CodingKeys: String, CodingKey {
        case receiptType = "receipt_type", bundleId = "bundle_id", applicationVersion = "application_version"
        case originalApplicationVersion = "original_application_version"
        case receiptCreationDateMs = "receipt_creation_date_ms", inApp = "in_app"
    }
    public init(receiptType: String?, bundleId: String, applicationVersion: String?, originalApplicationVersion: String?,
                receiptCreationDateMs: String?, inApp: [InAppPurchase]) {
        self.receiptType = receiptType; self.bundleId = bundleId; self.applicationVersion = applicationVersion
        self.originalApplicationVersion = originalApplicationVersion; self.receiptCreationDateMs = receiptCreationDateMs
        self.inApp = inApp
    }
}

/// One `in_app[]` entry with Apple's key names; dates as millisecond strings, as Apple sends them.
public struct InAppPurchase: Codable, Sendable, Equatable {
    public var quantity: String
    public var productId: String
    public var transactionId: String
    public var originalTransactionId: String?
    public var purchaseDateMs: String?
    public var originalPurchaseDateMs: String?
    public var expiresDateMs: String?
    public var cancellationDateMs: String?
    public var webOrderLineItemId: String?
    public var isTrialPeriod: String?
    public var isInIntroOfferPeriod: String?
    public var promotionalOfferId: String?

    enum CodingKeys: String, CodingKey {
        case quantity, productId = "product_id", transactionId = "transaction_id"
        case originalTransactionId = "original_transaction_id", purchaseDateMs = "purchase_date_ms"
        case originalPurchaseDateMs = "original_purchase_date_ms", expiresDateMs = "expires_date_ms"
        case cancellationDateMs = "cancellation_date_ms", webOrderLineItemId = "web_order_line_item_id"
        case isTrialPeriod = "is_trial_period", isInIntroOfferPeriod = "is_in_intro_offer_period"
        case promotionalOfferId = "promotional_offer_id"
    }
    public init(quantity: String, productId: String, transactionId: String, originalTransactionId: String? = nil,
                purchaseDateMs: String? = nil, originalPurchaseDateMs: String? = nil, expiresDateMs: String? = nil,
                cancellationDateMs: String? = nil, webOrderLineItemId: String? = nil, isTrialPeriod: String? = nil,
                isInIntroOfferPeriod: String? = nil, promotionalOfferId: String? = nil) {
        self.quantity = quantity; self.productId = productId; self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId; self.purchaseDateMs = purchaseDateMs
        self.originalPurchaseDateMs = originalPurchaseDateMs; self.expiresDateMs = expiresDateMs
        self.cancellationDateMs = cancellationDateMs; self.webOrderLineItemId = webOrderLineItemId
        self.isTrialPeriod = isTrialPeriod; self.isInIntroOfferPeriod = isInIntroOfferPeriod
        self.promotionalOfferId = promotionalOfferId
    }
}

public enum VerificationVerifyTransaction: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        /// A StoreKit 2 JWS (compact serialization).
        public var signedTransaction: String
        public var expectedBundleId: String?
        public init(signedTransaction: String, expectedBundleId: String? = nil) {
            self.signedTransaction = signedTransaction; self.expectedBundleId = expectedBundleId
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var status: Int
        public var reason: String?
        public var environment: String?
        /// The decoded JWS payload with Apple's field names.
        public var transaction: JSONValue?
        public init(status: Int, reason: String? = nil, environment: String? = nil, transaction: JSONValue? = nil) {
            self.status = status; self.reason = reason; self.environment = environment; self.transaction = transaction
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
            self.status = status; self.reason = reason; self.notification = notification
        }
    }
    public static let name = "verification.verifyNotification"
    public static let summary = "Verify an App Store Server Notification v2 signed payload."
}
