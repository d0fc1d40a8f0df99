import IAPProtocol
import JSONRPC

/// One purchase as verification vouched for it: from an app receipt's `in_app` entry or a StoreKit 2
/// signed transaction. Only verified data becomes a `VerifiedPurchase`.
public struct VerifiedPurchase: Sendable, Equatable {
    /// `Production`, `Sandbox`, `Xcode`: transaction ids are unique only within one environment.
    public var environment: String
    public var transactionId: String
    public var originalTransactionId: String
    public var productId: String
    public var quantity: Int64
    public var purchaseDateMs: Int64
    public var expiresDateMs: Int64?
    /// Set when Apple refunded or revoked the transaction.
    public var cancellationDateMs: Int64?
    /// Apple's prorated refund (REFUND_PRORATED): the share refunded, in milliunits of a percent; nil: whole.
    public var proratedRefundMilli: Int64? = nil
    /// Apple's `isUpgraded` (`AppleTransaction.isUpgraded`): its period ends where it began, and it moves nothing.
    public var isUpgraded = false
    /// When Apple signed what it says (a signed transaction's `signedDate`, a receipt's creation); nil: not known.
    public var signedDateMs: Int64? = nil
    /// StoreKit 2 only: the account token the app passed at purchase.
    public var appAccountToken: String?
    /// StoreKit 2 only: what was paid, in milliunits of `currency`, as the signed transaction says (receipts carry no
    /// price: their purchases count as unpriced, never as free).
    public var price: Int64? = nil
    public var currency: String? = nil
    /// StoreKit 2 only: the offer redeemed with it (Apple's `offerIdentifier`): a retention answer never offers it again.
    public var offerIdentifier: String? = nil
    /// Google Play purchases only: what acknowledging it at Google needs (nil: an App Store purchase).
    public var play: PlayFacts? = nil

    public init(
        environment: String, transactionId: String, originalTransactionId: String, productId: String,
        quantity: Int64 = 1, purchaseDateMs: Int64, expiresDateMs: Int64? = nil, cancellationDateMs: Int64? = nil,
        appAccountToken: String? = nil
    ) {
        self.environment = environment
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.productId = productId
        self.quantity = quantity
        self.purchaseDateMs = purchaseDateMs
        self.expiresDateMs = expiresDateMs
        self.cancellationDateMs = cancellationDateMs
        self.appAccountToken = appAccountToken
    }

    /// Finished at Apple by the server: Production purchases only. An Xcode-signed one exists only on the developer's
    /// Mac; a Sandbox one (TestFlight, sandbox accounts) is free to make, so a flood of them must not spend the Finish
    /// Transaction budget (one pace per instance, 50 a second) that real purchases need, and the tester's own
    /// `finish()` serves it.
    var finishableAtApple: Bool { environment == "Production" && play == nil }

    /// The store it was bought in, as events name it.
    var store: String { play == nil ? "appStore" : "googlePlay" }

    /// The purchases of a verified receipt (status 0), oldest first.
    static func fromReceipt(_ response: VerifyReceiptResponse) throws(RPCError) -> [VerifiedPurchase] {
        guard let receipt = response.receipt else { return [] }
        // Verification names the environment of every verified receipt; without one nothing is granted.
        guard let environment = response.environment, ["Production", "Sandbox", "Xcode"].contains(environment) else {
            throw RPCError.invalidReceipt(status: 21002, reason: "unknownEnvironment", detail: "the verified receipt names no known environment")
        }
        var purchases: [VerifiedPurchase] = []
        let created = receipt.receiptCreationDateMs.flatMap { Int64($0) }
        for entry in receipt.inApp {
            guard !entry.transactionId.isEmpty, !entry.productId.isEmpty else {
                throw RPCError.invalidReceipt(
                    status: 21002, reason: "incompleteTransaction",
                    detail: "a receipt entry has no transaction or product id")
            }
            var purchase = VerifiedPurchase(
                environment: environment, transactionId: entry.transactionId,
                originalTransactionId: entry.originalTransactionId ?? entry.transactionId, productId: entry.productId,
                quantity: max(1, Int64(entry.quantity) ?? 1), purchaseDateMs: entry.purchaseDateMs.flatMap { Int64($0) } ?? 0,
                expiresDateMs: entry.expiresDateMs.flatMap { Int64($0) }, cancellationDateMs: entry.cancellationDateMs.flatMap { Int64($0) })
            purchase.signedDateMs = created  // the whole receipt's signing time
            purchases.append(purchase)
        }
        return purchases.sorted { ($0.purchaseDateMs, $0.transactionId) < ($1.purchaseDateMs, $1.transactionId) }
    }

    /// A verified StoreKit 2 transaction. `environment`: the one verification vouched for (else the transaction's
    /// own). nil without a known environment (`Production`, `Sandbox`, `Xcode`/`LocalTesting`).
    init?(_ transaction: AppleTransaction, environment: String?) {
        let known = ["Production": "Production", "Sandbox": "Sandbox", "Xcode": "Xcode", "LocalTesting": "Xcode"]
        guard let environment = (environment ?? transaction.environment).flatMap({ known[$0] }) else { return nil }
        self.init(
            environment: environment, transactionId: transaction.transactionId, originalTransactionId: transaction.originalTransactionId,
            productId: transaction.productId, quantity: transaction.quantity, purchaseDateMs: transaction.purchaseDateMs,
            expiresDateMs: transaction.expiresDateMs, cancellationDateMs: transaction.revocationDateMs,
            appAccountToken: transaction.appAccountToken)
        self.price = transaction.price
        self.currency = transaction.currency
        self.offerIdentifier = transaction.offerIdentifier
        self.proratedRefundMilli = transaction.proratedRefundMilli
        self.signedDateMs = transaction.signedDateMs
        if transaction.isUpgraded, let expires = transaction.expiresDateMs {
            // Upgraded to another plan, whose transaction holds the access from the upgrade on (Apple starts it at once):
            // this period gives none of its own. Until 2026-11-30 it gave its plan to its old expiry (up to a year, the
            // rest of which Apple refunded) when redeemed without the upgrade's transaction.
            self.expiresDateMs = min(expires, transaction.purchaseDateMs)
            self.isUpgraded = true
        }
    }

    /// A revocation in this copy that Apple took back since: the copy was signed before Apple last signed that the
    /// transaction stands (`StoredPurchase.standsSignedMs`). Apple: of two words about a transaction, the one with the
    /// later `signedDate` holds. A copy without a signed time keeps its revocation (Apple's always have one).
    func revocationSignedBefore(standsSignedMs: Int64?) -> Bool {
        guard cancellationDateMs != nil, let reversal = standsSignedMs, let signed = signedDateMs else { return false }
        return signed < reversal
    }

    /// Coins a prorated refund leaves of a grant of `granted`: the refunded share taken back, rounded to the nearest coin
    /// (Apple rounds the share to three decimals: one of three units is 33.333%). Nil for a refund of the whole.
    func coinsKept(ofGrant granted: Int64) -> Int64? { Self.coinsKept(ofGrant: granted, share: proratedRefundMilli) }

    /// Coins a refund of `share` milliunits (nil: the whole, answered nil) leaves of a grant of `granted`.
    static func coinsKept(ofGrant granted: Int64, share: Int64?) -> Int64? {
        guard let share, granted > 0 else { return nil }
        let taken = (granted * share + 50_000) / 100_000  // coins are at most 10^9 a unit (`CoinLimits`): no overflow
        return max(0, granted - taken)
    }

    /// A verified transaction payload as verification answers it, decoded once (`AppleTransaction`).
    public static func fromSignedTransaction(_ payload: JSONValue, environment: String?) -> VerifiedPurchase? {
        AppleTransaction(payload).flatMap { VerifiedPurchase($0, environment: environment) }
    }
}

/// What a product grants, as the catalog defines it, reduced to what fulfillment acts on.
public enum GrantRule: Sendable, Equatable {
    case coins(perUnit: Int64)
    case permanent(entitlement: String)
    case subscription(entitlement: String)
    case timeLimited(entitlement: String, durationDays: Int)

    init(_ product: Product) {
        switch product.grant {
        case .coins(let n): self = .coins(perUnit: n)
        case .content(let e, _): self = .permanent(entitlement: e)
        case .subscription(let e, _): self = .subscription(entitlement: e)
        case .timeLimited(let e, let days): self = .timeLimited(entitlement: e, durationDays: days)
        }
    }

    var entitlement: String? {
        switch self {
        case .coins: return nil
        case .permanent(let e), .subscription(let e), .timeLimited(let e, _): return e
        }
    }

    /// Stored in `processedTransaction.grantKind`.
    var kind: String {
        switch self {
        case .coins: return "coins"
        case .permanent: return "permanent"
        case .subscription: return "subscription"
        case .timeLimited: return Self.timeLimitedKind
        }
    }

    static let timeLimitedKind = "timeLimited"
    /// The longest one purchase of a pass may last (its length times the units bought): a hundred years, as the coins'
    /// `CoinLimits.maxGrant` bounds a grant (an Xcode-signed copy can claim any quantity).
    static let longestPassMs: Int64 = 36_500 * 86_400_000
}

/// What fulfillment keeps of a verified Google Play purchase beyond the common fields: where to acknowledge it, and
/// whether Google already has.
public struct PlayFacts: Sendable, Equatable, Codable {
    public var packageName: String
    /// The product or subscription id as Google knows it.
    public var productId: String
    public var purchaseToken: String
    public var kind: PlayPurchaseKind
    public var acknowledged: Bool
    public var consumed: Bool
    /// A one-time purchase's quantity as bought (the purchase's own `quantity` is what Google still counts as refundable:
    /// what a quantity-based partial refund left).
    public var purchasedQuantity: Int64?
    /// A subscription's: the purchase token of the plan it replaced (an upgrade, a downgrade), as Google links it.
    public var linkedPurchaseToken: String?

    public init(
        packageName: String, productId: String, purchaseToken: String, kind: PlayPurchaseKind, acknowledged: Bool, consumed: Bool,
        purchasedQuantity: Int64? = nil, linkedPurchaseToken: String? = nil
    ) {
        self.packageName = packageName
        self.productId = productId
        self.purchaseToken = purchaseToken
        self.kind = kind
        self.acknowledged = acknowledged
        self.consumed = consumed
        self.purchasedQuantity = purchasedQuantity
        self.linkedPurchaseToken = linkedPurchaseToken
    }

    /// The payload of its `playAcknowledge` outbox item (`consume`: a consumable, consumed so it can be bought again).
    struct Owed: Codable, Equatable {
        var packageName: String
        var productId: String
        var kind: PlayPurchaseKind
        var consume: Bool
    }
}

extension VerifiedPurchase {
    /// A Play purchase in the suite's terms: the purchase token is the original (a subscription keeps it across renewals;
    /// an upgrade or re-signup gets a new one), the order the transaction (each renewal has its own; a purchase without an
    /// order, a promo code, is its token), a license tester's purchase is Sandbox (free to make), the obfuscated account id
    /// is the appAccountToken the app passed. A purchase Google cancelled is refunded as of now.
    public init(play v: VerifiedPlayPurchase, catalogProductId: String, nowMs: Int64) {
        // The units still the customer's: Google's refundable quantity, never more than bought; none left is a refund of
        // every unit (what a first redeem records as granted and taken back).
        let bought = Int64(max(v.quantity, 1))
        let units = min(max(Int64(v.refundableQuantity ?? v.quantity), 0), bought)
        self.init(
            environment: v.test ? "Sandbox" : "Production", transactionId: v.orderId ?? v.purchaseToken, originalTransactionId: v.purchaseToken,
            productId: catalogProductId, quantity: units == 0 ? bought : units, purchaseDateMs: v.purchaseTimeMs ?? nowMs,
            expiresDateMs: v.kind == .subscription ? (v.expiryTimeMs ?? nowMs) : nil,
            cancellationDateMs: v.kind == .product && (v.state == "CANCELLED" || units == 0) ? nowMs : nil,
            appAccountToken: v.obfuscatedExternalAccountId?.lowercased())
        play = PlayFacts(
            packageName: v.packageName, productId: v.productId, purchaseToken: v.purchaseToken, kind: v.kind, acknowledged: v.acknowledged,
            consumed: v.consumed ?? false, purchasedQuantity: v.kind == .product ? bought : nil,
            linkedPurchaseToken: v.kind == .subscription ? v.linkedPurchaseToken : nil)
    }
}
