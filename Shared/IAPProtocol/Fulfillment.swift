import JSONRPC

// fulfillment.* — exactly-once grants, the coin ledger, entitlements, content (DESIGN.md section 3).

public enum RedeemOutcome: String, Codable, Sendable, JSONSchemaEnum {
    case granted, alreadyGranted, restored, ownedByAnotherAccount, unknownProduct, revoked, rejected
}

public struct RedeemParams: Codable, Sendable, Equatable {
    public var session: String
    public var receiptData: String?
    public var signedTransactions: [String]?
    public var deviceIdentifier: String?
    public init(session: String, receiptData: String? = nil, signedTransactions: [String]? = nil, deviceIdentifier: String? = nil) {
        self.session = session; self.receiptData = receiptData
        self.signedTransactions = signedTransactions; self.deviceIdentifier = deviceIdentifier
    }
}

public struct TransactionResult: Codable, Sendable, Equatable {
    public var transactionId: String
    public var originalTransactionId: String
    public var productId: String
    public var outcome: RedeemOutcome
    /// True once the grant is durably committed: the app may call finishTransaction.
    public var finishable: Bool
    public init(transactionId: String, originalTransactionId: String, productId: String, outcome: RedeemOutcome, finishable: Bool) {
        self.transactionId = transactionId; self.originalTransactionId = originalTransactionId
        self.productId = productId; self.outcome = outcome; self.finishable = finishable
    }
}

public struct Entitlement: Codable, Sendable, Equatable {
    public var entitlement: String
    public var productId: String
    public var expiresAtMs: Int64?
    public var originalTransactionId: String
    public init(entitlement: String, productId: String, expiresAtMs: Int64? = nil, originalTransactionId: String) {
        self.entitlement = entitlement; self.productId = productId
        self.expiresAtMs = expiresAtMs; self.originalTransactionId = originalTransactionId
    }
}

public struct RedeemResult: Codable, Sendable, Equatable {
    public var accountId: String
    public var results: [TransactionResult]
    public var balance: Int64
    public var entitlements: [Entitlement]
    public init(accountId: String, results: [TransactionResult], balance: Int64, entitlements: [Entitlement]) {
        self.accountId = accountId; self.results = results; self.balance = balance; self.entitlements = entitlements
    }
}

public enum FulfillmentRedeem: RPCMethod {
    public typealias Params = RedeemParams
    public typealias Result = RedeemResult
    public static let name = "fulfillment.redeem"
    public static let summary = "Verify a receipt or signed transactions and grant each purchase exactly once."
}

public enum FulfillmentRestore: RPCMethod {
    public typealias Params = RedeemParams
    public typealias Result = RedeemResult
    public static let name = "fulfillment.restore"
    public static let summary = "Re-derive entitlements from a receipt for the signed-in account; never grants consumables."
}

public enum FulfillmentGetEntitlements: RPCMethod {
    public typealias Params = SessionParams
    public struct Result: Codable, Sendable, Equatable {
        public var entitlements: [Entitlement]
        public var balance: Int64
        public init(entitlements: [Entitlement], balance: Int64) { self.entitlements = entitlements; self.balance = balance }
    }
    public static let name = "fulfillment.getEntitlements"
    public static let summary = "The account's active entitlements and coin balance."
}

public struct BalanceResult: Codable, Sendable, Equatable {
    public var balance: Int64
    public init(balance: Int64) { self.balance = balance }
}

public enum FulfillmentGetBalance: RPCMethod {
    public typealias Params = SessionParams
    public typealias Result = BalanceResult
    public static let name = "fulfillment.getBalance"
    public static let summary = "The account's coin balance."
}

public enum FulfillmentSpendCoins: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var session: String
        public var amount: Int64
        /// Applied at most once; reused with other params it is a conflict (1004).
        public var idempotencyKey: String
        public var memo: String?
        public init(session: String, amount: Int64, idempotencyKey: String, memo: String? = nil) {
            self.session = session; self.amount = amount; self.idempotencyKey = idempotencyKey; self.memo = memo
        }
    }
    public typealias Result = BalanceResult
    public static let name = "fulfillment.spendCoins"
    public static let summary = "Spend coins once per idempotency key; never below zero."
}

public enum LedgerKind: String, Codable, Sendable, JSONSchemaEnum {
    case grant, spend, reversal
}

public struct LedgerEntry: Codable, Sendable, Equatable {
    public var id: Int64
    public var delta: Int64
    public var balance: Int64
    public var kind: LedgerKind
    public var transactionId: String?
    public var memo: String?
    /// Reversals only: coins the refund could not take back because they were already spent (owed).
    public var shortfall: Int64?
    public var createdAtMs: Int64
    public init(id: Int64, delta: Int64, balance: Int64, kind: LedgerKind, transactionId: String? = nil, memo: String? = nil, createdAtMs: Int64) {
        self.id = id; self.delta = delta; self.balance = balance; self.kind = kind
        self.transactionId = transactionId; self.memo = memo; self.createdAtMs = createdAtMs
    }
}

public enum FulfillmentListLedger: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var session: String
        public var after: Int64?
        public var limit: Int?
        public init(session: String, after: Int64? = nil, limit: Int? = nil) { self.session = session; self.after = after; self.limit = limit }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var entries: [LedgerEntry]
        public var next: Int64?
        public init(entries: [LedgerEntry], next: Int64? = nil) { self.entries = entries; self.next = next }
    }
    public static let name = "fulfillment.listLedger"
    public static let summary = "The account's coin ledger, oldest first, paged by entry id."
}

public struct ContentItem: Codable, Sendable, Equatable {
    public var contentId: String
    public var productId: String
    public var size: Int64
    public var sha256: String
    public init(contentId: String, productId: String, size: Int64, sha256: String) {
        self.contentId = contentId; self.productId = productId; self.size = size; self.sha256 = sha256
    }
}

public enum FulfillmentListContent: RPCMethod {
    public typealias Params = SessionParams
    public struct Result: Codable, Sendable, Equatable {
        public var content: [ContentItem]
        public init(content: [ContentItem]) { self.content = content }
    }
    public static let name = "fulfillment.listContent"
    public static let summary = "Downloadable content the account is entitled to."
}

public enum FulfillmentReadContent: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var session: String
        public var contentId: String
        public var offset: Int64
        public var length: Int
        public init(session: String, contentId: String, offset: Int64, length: Int) {
            self.session = session; self.contentId = contentId; self.offset = offset; self.length = length
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// Base64 of the bytes read.
        public var data: String
        public var offset: Int64
        public var size: Int64
        public var sha256: String
        public init(data: String, offset: Int64, size: Int64, sha256: String) {
            self.data = data; self.offset = offset; self.size = size; self.sha256 = sha256
        }
    }
    public static let name = "fulfillment.readContent"
    public static let summary = "A chunk of an entitled content file (resumable downloads)."
}

public enum FulfillmentApplyNotification: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var signedPayload: String
        public init(signedPayload: String) { self.signedPayload = signedPayload }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var applied: Bool
        public init(applied: Bool) { self.applied = applied }
    }
    public static let name = "fulfillment.applyNotification"
    public static let summary = "Apply an App Store Server Notification v2 (refunds, revocations, renewals)."
}

public enum FulfillmentRevokeTransaction: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        public var transactionId: String
        public var reason: String
        public init(adminToken: String, transactionId: String, reason: String) {
            self.adminToken = adminToken; self.transactionId = transactionId; self.reason = reason
        }
    }
    public typealias Result = EmptyResult
    public static let name = "fulfillment.revokeTransaction"
    public static let summary = "Admin: revoke a transaction's grant (a reversal ledger entry; entitlement removed)."
    public static let access = RPCAccess.admin
}
