import JSONRPC

/// Money of one currency, in milliunits (Apple's `price`: 990 is 0.99).
public struct CurrencyAmount: Codable, Sendable, Equatable {
    public var currency: String
    public var milliunits: Int64
    public init(currency: String, milliunits: Int64) {
        self.currency = currency
        self.milliunits = milliunits
    }
}

/// One UTC day of Production purchases.
public struct OverviewDay: Codable, Sendable, Equatable {
    /// 00:00 UTC of the day.
    public var dayStartMs: Int64
    /// Purchases made that day (by purchase date).
    public var purchases: Int64
    /// Purchases granted here that day (by when they were processed).
    public var grants: Int64
    /// Purchases refunded that day.
    public var refunds: Int64
    /// What the day's purchases cost, per currency, from their signed transactions' prices.
    public var revenue: [CurrencyAmount]
    /// The day's purchases without a price (receipts carry none): counted apart, never as zero.
    public var unpriced: Int64
    public init(dayStartMs: Int64, purchases: Int64, grants: Int64, refunds: Int64, revenue: [CurrencyAmount], unpriced: Int64) {
        self.dayStartMs = dayStartMs
        self.purchases = purchases
        self.grants = grants
        self.refunds = refunds
        self.revenue = revenue
        self.unpriced = unpriced
    }
}

/// Support (admin): the last days at a glance, Production only (Sandbox purchases are free): purchases, grants, refunds
/// and revenue per currency per day, and what is waiting now.
public enum FulfillmentGetOverview: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var adminToken: String
        /// Days back, today included (1-90, default 30).
        public var days: Int?
        public init(adminToken: String, days: Int? = nil) {
            self.adminToken = adminToken
            self.days = days
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// Oldest first; the last one is today (UTC).
        public var days: [OverviewDay]
        /// Production subscriptions in force now.
        public var activeSubscriptions: Int64
        public var parkedNotifications: Int64
        /// Acknowledgements, finishes and ties owed to the stores, waiting in the outbox.
        public var waitingAtStores: Int64
        public init(days: [OverviewDay], activeSubscriptions: Int64, parkedNotifications: Int64, waitingAtStores: Int64) {
            self.days = days
            self.activeSubscriptions = activeSubscriptions
            self.parkedNotifications = parkedNotifications
            self.waitingAtStores = waitingAtStores
        }
    }
    public static let name = "fulfillment.getOverview"
    public static let access = RPCAccess.admin
    public static let summary = "Support: Production purchases, grants, refunds and revenue per currency per day, and what waits now."
}
