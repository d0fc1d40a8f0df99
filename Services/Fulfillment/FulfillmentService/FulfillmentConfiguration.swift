import Crypto
import Foundation
import IAPProtocol
import ServiceSupport

/// What Sandbox (TestFlight, App Review, sandbox testers) and Xcode purchases are worth here (docs/security.md).
/// They cost nothing, so by default they never create production value.
public enum SandboxPolicy: String, Sendable, CaseIterable {
    /// Default: they grant into the account's Sandbox scope (its own balance, ledger, entitlements).
    case isolate
    /// Development only: they grant into Production like real purchases.
    case grant
    /// They grant nothing (outcome `wrongEnvironment`).
    case refuse

    /// The scope a purchase of `environment` grants into; nil: refused.
    public func scope(forEnvironment environment: String) -> AccountScope? {
        if environment == "Production" { return .production }
        switch self {
        case .isolate: return .sandbox
        case .grant: return .production
        case .refuse: return nil
        }
    }
}

/// The subscription-offer key from App Store Connect (In-App Purchase keys): signs promotional offers and
/// introductory-offer eligibility. Loaded once; its private half is never logged or returned.
public struct OfferSigningKey: Sendable, CustomStringConvertible {
    public let keyId: String
    public let issuerId: String
    /// The app the offers are for (signed into every offer).
    public let bundleId: String
    let key: P256.Signing.PrivateKey

    public init(keyId: String, issuerId: String, bundleId: String, pem: String) throws {
        self.keyId = keyId
        self.issuerId = issuerId
        self.bundleId = bundleId
        self.key = try P256.Signing.PrivateKey(pemRepresentation: pem)
    }

    public var description: String { "OfferSigningKey(keyId: \(keyId), issuerId: \(issuerId), bundleId: \(bundleId), key: <redacted>)" }
}

public struct FulfillmentConfiguration: Sendable {
    /// Signs subscription offers (`signOffer`, `offerEligibility`); without it offers are refused.
    public var offerKey: OfferSigningKey?
    /// Token for `fulfillment.revokeTransaction`; nil refuses every admin call.
    public var adminToken: String?
    /// Token for accounts' internal methods: lets a notification about a purchase never redeemed find its
    /// account through the purchase's appAccountToken. Nil: such notifications are not applied.
    public var internalToken: String?
    /// What happens when a purchase's original transaction is bound to another account.
    public var ownershipPolicy: OwnershipPolicy = .refuse
    /// What Sandbox and Xcode purchases grant.
    public var sandboxPolicy: SandboxPolicy = .isolate
    /// Signs `contentURL` answers (the key the edge checks them with); nil: `contentURL` is unavailable.
    public var contentURLSigner: ContentURLSigner?
    /// How long a content URL is good for. Short: a refund stops new URLs, not ones already issued.
    public var contentURLLifetimeMs: Int64 = 5 * 60 * 1000
    /// The edge's public URL (`https://iap.example.com`); content URLs are paths without it.
    public var contentURLBase: String?
    /// Development only (`--sandbox-content`): Sandbox-scope entitlements (TestFlight, Xcode; free to buy) unlock
    /// content too. Off, one content directory serves paid files to Production entitlements only.
    public var sandboxContent = false
    /// Finish Transaction at Apple for every transaction recorded here (through the outbox, with the internal token),
    /// so the device stops delivering a purchase whose app died before its own `finish()`. Off (`--no-finish-at-apple`,
    /// `IAP_FINISH_AT_APPLE=0` or empty) when the App Store Server API is not configured: the items would wait for it.
    public var finishAtApple = true
    /// Finish Transaction calls per second at most: Apple's documented limit for the endpoint (50 a second in production,
    /// enforced hourly). A burst of grants is finished at this pace; nothing is lost meanwhile.
    public var finishesPerSecond = 50.0
    /// Retries of notifications whose processing failed, and when they are parked.
    public var inboxRetry = InboxRetryPolicy()
    /// How long a notification being processed as it arrives is left alone by the inbox worker.
    public var inboxLeaseMs: Int64 = 60_000
    /// Reconciliation: how far back the first Notification History read goes, how much each read overlaps
    /// the previous one (Apple records a notification a little after its signed date), and how many stale
    /// subscriptions one run asks Apple about.
    public var reconcileFirstWindowMs: Int64 = 7 * 86_400_000
    public var reconcileOverlapMs: Int64 = 60 * 60 * 1000
    public var reconcileSubscriptionsPerRun = 200

    /// Apple accepts consumption information for this long after its CONSUMPTION_REQUEST.
    public var consumptionWindowMs: Int64 = 12 * 60 * 60 * 1000

    /// How long what the catalog says a product grants is reused before asking again (`GrantRuleCache`):
    /// a grant changed in the catalog reaches redeems at most this much later. Zero asks every time.
    public var catalogCacheMs: Int64 = 2_000

    /// Largest `readContent` chunk (its base64 must fit well inside a 4 MiB line).
    public var maxContentChunk = 1 << 20
    /// Largest single spend.
    public var maxSpend: Int64 = 1_000_000_000_000
    /// Longest idempotency key and memo.
    public var maxIdempotencyKeyBytes = 200
    public var maxMemoBytes = 500
    /// Ledger page size: default and upper bound.
    public var defaultLedgerPage = 50
    public var maxLedgerPage = 500
    /// Most signed transactions in one redeem.
    public var maxSignedTransactions = 100
    /// Each account's budget of App Store Server API calls made for it (redeem by `transactionIds`, restore by
    /// `transactionId`): `appleCallBurst` at once, refilled at `appleCallsPerMinute`. A transaction id costs one, a
    /// whole history `appleHistoryCost` (its pages: a restore tapped twice still fits). Spent, the call is refused (`rateLimited`, `retryAfterMs`) before Apple is asked:
    /// the developer's key and Apple's rate limit serve notifications and reconciliation first.
    public var appleCallBurst = 20
    public var appleCallsPerMinute = 20.0
    public var appleHistoryCost = 5

    /// How long events are kept (`--event-retention-days`); nil: forever. Each account's latest is always kept.
    public var eventRetentionMs: Int64?
    public var webhooks = WebhookPolicy()

    public init() {}
}

/// How webhooks are delivered (docs/events.md).
public struct WebhookPolicy: Sendable {
    public var maxEndpoints = 20
    /// How long the secret before a rotation keeps signing beside the new one.
    public var rotationOverlapMs: Int64 = 86_400_000
    /// An account's events that have waited this long without progress mark the endpoint failing.
    public var giveUpAfterMs: Int64 = 3 * 86_400_000
    /// Events read from the feed per endpoint per round, accounts delivered per round, and how many at once.
    public var dispatchBatch = 1_000
    public var itemsPerRound = 200
    public var concurrency = 32
    /// An account's events sent in one go before its item yields to others.
    public var eventsPerItem = 50
    /// How often the worker looks at the feed while endpoints exist. Each look is a read and, when there is news, a
    /// write; between looks an account's events gather, to go out in one round with one settling write. Measured
    /// (Benchmarks/README.md, events): woken after every delivery instead, the worker's small writes took a quarter of
    /// the redeems' throughput.
    public var pollInterval: Duration = .milliseconds(250)
    /// How long a claimed (endpoint, account) item is left to the instance delivering it; after a crash its events are
    /// sent again when it ends. An item's round starts no new request past `leaseMs - requestTimeoutMs - 5 s`, so no
    /// other instance can claim it while one of its requests may still be in flight.
    public var leaseMs: Int64 = 60_000
    public var requestTimeoutMs: Int64 = 15_000
    public init() {}
}

/// When a failed delivery is tried again: within a second, then doubling with jitter (each wait half to all of the
/// doubled one), at most an hour apart, until the endpoint gives up (`WebhookPolicy.giveUpAfterMs`).
public enum WebhookRetry {
    public static let firstDelayMs: Int64 = 1_000
    public static let maxDelayMs: Int64 = 3_600_000

    /// `failures`: this one included; `jitter` in 0...1.
    public static func nextAttemptAtMs(failures: Int, nowMs: Int64, jitter: Double) -> Int64 {
        let doubled = min(maxDelayMs, firstDelayMs << Int64(min(max(failures, 1) - 1, 30)))
        return nowMs + Int64(Double(doubled) * (0.5 + 0.5 * min(max(jitter, 0), 1)))
    }
}
