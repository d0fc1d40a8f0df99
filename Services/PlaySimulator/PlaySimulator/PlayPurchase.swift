import Foundation
import IAPProtocol

/// One Google Play purchase as the simulator keeps it: a one-time product (with its quantity, acknowledgement and
/// consumption) or a subscription (one line item of a base plan, its period, state and orders). The rules that move
/// it along the simulated clock are here, apart from storage and HTTP, so they are pure and tested on their own.
struct PlayPurchase: Codable, Sendable, Equatable {
    enum Kind: String, Codable, Sendable { case product, subscription }

    var purchaseToken: String
    var packageName: String
    /// The one-time product's id, or the subscription's.
    var productId: String
    var kind: Kind
    var basePlanId: String?
    var offerId: String?
    /// The first order (`GPA.` and four groups); a subscription's renewals are `<orderId>..0`, `..1`, ...
    var orderId: String
    var renewals: Int = 0
    var quantity: Int
    var refundableQuantity: Int
    var obfuscatedExternalAccountId: String?
    var obfuscatedExternalProfileId: String?
    /// A license tester's purchase: test card, accelerated periods, the short acknowledgement window.
    var test: Bool
    var regionCode: String
    var priceMicros: Int64
    var currency: String
    var purchaseTimeMs: Int64
    var acknowledged = false
    var developerPayload: String?
    var consumed = false
    /// A one-time purchase refunded and revoked (`purchaseState` 1).
    var canceled = false

    // Subscriptions.
    var periodMs: Int64 = 0
    var expiryTimeMs: Int64 = 0
    var autoRenewing = false
    var state: PlaySubscriptionState = .active
    var cancellation: PlayCancellation?
    var cancelTimeMs: Int64?
    var linkedPurchaseToken: String?
    /// The customer's payment method fails from the next charge on (`play.subscriptionEvent` declinePayment).
    var paymentDeclined = false
    var gracePeriodMs: Int64 = 0
    var accountHoldMs: Int64 = 0
    /// Account hold ends (and the subscription expires) at this time.
    var holdUntilMs: Int64?
    /// A pause asked for, starting at the next renewal, for this long.
    var pendingPauseMs: Int64?
    var pausedUntilMs: Int64?
    /// A DEFERRED replacement's plan: its line item waits (no expiry) until the current one, the replaced plan's, ends;
    /// then it takes over as a renewal, its first charge (`advance`).
    var deferred: PlayPlanItem?
    /// The replaced plan's line item after a DEFERRED replacement took over: still listed, expired.
    var replacedItem: PlayPlanItem?

    /// Every order of the purchase, oldest first.
    var orderIds: [String] { [orderId] + (0..<max(renewals, 0)).map { "\(orderId)..\($0)" } }
    var latestOrderId: String { renewals == 0 ? orderId : "\(orderId)..\(renewals - 1)" }

    /// Google's documented rule: not acknowledged three days after the purchase, it is refunded and revoked; license
    /// testers' purchases much sooner (Google's testing page says three minutes in its text and five in its table: five here).
    var acknowledgementDeadlineMs: Int64 { purchaseTimeMs + (test ? 5 * 60_000 : 3 * 86_400_000) }

    /// Whether the purchase still gives access (a subscription before its expiry, a one-time purchase not revoked).
    var isLive: Bool {
        kind == .product ? !canceled : [.active, .canceled, .inGracePeriod].contains(state)
    }

    /// When something next happens to it without anyone asking: nil when nothing will.
    var dueAtMs: Int64? {
        var due: [Int64] = []
        if !acknowledged, isLive { due.append(acknowledgementDeadlineMs) }
        if kind == .subscription {
            switch state {
            case .active, .canceled, .inGracePeriod: due.append(expiryTimeMs)
            case .onHold: if let holdUntilMs { due.append(holdUntilMs) }
            case .paused: if let pausedUntilMs { due.append(pausedUntilMs) }
            case .expired: break
            }
        }
        return due.min()
    }

    func encoded() throws -> String { String(decoding: try JSONEncoder().encode(self), as: UTF8.self) }
    static func decode(_ body: String) throws -> PlayPurchase { try JSONDecoder().decode(PlayPurchase.self, from: Data(body.utf8)) }
}

/// A subscription line item other than the purchase's current one (a DEFERRED replacement's waiting plan, or the plan it
/// took over from).
struct PlayPlanItem: Codable, Sendable, Equatable {
    var productId: String
    var basePlanId: String?
    var offerId: String?
    var periodMs: Int64
    var priceMicros: Int64
    /// The replaced item's: when it ended, and its last order.
    var expiryTimeMs: Int64?
    var latestOrderId: String?
}

/// SubscriptionPurchaseV2's `subscriptionState` (pending purchases are not simulated).
enum PlaySubscriptionState: String, Codable, Sendable {
    case active, canceled, inGracePeriod, onHold, paused, expired

    var googleName: String {
        switch self {
        case .active: "SUBSCRIPTION_STATE_ACTIVE"
        case .canceled: "SUBSCRIPTION_STATE_CANCELED"
        case .inGracePeriod: "SUBSCRIPTION_STATE_IN_GRACE_PERIOD"
        case .onHold: "SUBSCRIPTION_STATE_ON_HOLD"
        case .paused: "SUBSCRIPTION_STATE_PAUSED"
        case .expired: "SUBSCRIPTION_STATE_EXPIRED"
        }
    }
}

/// Who ended a subscription (`canceledStateContext`).
enum PlayCancellation: String, Codable, Sendable {
    case user, system, developer, replacement
}

/// What happened to a purchase, as a real-time developer notification says it (and, for revocations, the voided purchase).
enum PlayEvent: Equatable, Sendable {
    /// `subscriptionNotification` with Google's `notificationType`.
    case subscription(PlaySubscriptionNotification)
    /// `oneTimeProductNotification` ONE_TIME_PRODUCT_PURCHASED.
    case productPurchased
    /// A revocation: a voided purchase of `orderId` (and `voidedPurchaseNotification`), `quantity` nil for the whole purchase.
    case voided(orderId: String, source: PlayVoidedSource, reason: PlayVoidedReason, quantity: Int?)
}

/// `subscriptionNotification.notificationType`, Google's numbers.
enum PlaySubscriptionNotification: Int, Sendable {
    case recovered = 1, renewed = 2, canceled = 3, purchased = 4, onHold = 5, inGracePeriod = 6, restarted = 7
    case paused = 10, pauseScheduleChanged = 11, revoked = 12, expired = 13
}

/// Google's test subscriptions renew at most six times.
let playTestRenewalLimit = 6

extension PlayPurchase {
    /// Moves the purchase along the clock to `nowMs`: acknowledgement deadlines, renewals, grace, hold, pauses and
    /// expiries that fell due, in time order, each event stamped with when it happened.
    mutating func advance(to nowMs: Int64) -> [(atMs: Int64, event: PlayEvent)] {
        var events: [(Int64, PlayEvent)] = []
        while let due = dueAtMs, due <= nowMs {
            if !acknowledged, isLive, acknowledgementDeadlineMs == due {
                events += revoke(atMs: due, source: .google, reason: .unacknowledgedPurchase, cancellation: .system)
                continue
            }
            switch state {
            case .active, .canceled:
                if autoRenewing, let next = deferred {
                    // A DEFERRED replacement's plan takes over as the replaced one's item ends: the renewal below is its
                    // first period and charge; the replaced item stays listed, expired.
                    replacedItem = PlayPlanItem(
                        productId: productId, basePlanId: basePlanId, offerId: offerId, periodMs: periodMs, priceMicros: priceMicros,
                        expiryTimeMs: due, latestOrderId: latestOrderId)
                    (productId, basePlanId, offerId, periodMs, priceMicros) = (
                        next.productId, next.basePlanId, next.offerId, next.periodMs, next.priceMicros
                    )
                    deferred = nil
                }
                if !autoRenewing || (test && renewals >= playTestRenewalLimit) {
                    state = .expired
                    autoRenewing = false
                    if cancellation == nil { cancellation = .system }
                    events.append((due, .subscription(.expired)))
                } else if let pause = pendingPauseMs {
                    pendingPauseMs = nil
                    state = .paused
                    pausedUntilMs = due + pause
                    events.append((due, .subscription(.paused)))
                } else if paymentDeclined {
                    if gracePeriodMs > 0 {
                        state = .inGracePeriod
                        expiryTimeMs = due + gracePeriodMs
                        events.append((due, .subscription(.inGracePeriod)))
                    } else {
                        enterHold(atMs: due, &events)
                    }
                } else {
                    renewals += 1
                    expiryTimeMs = due + periodMs
                    events.append((due, .subscription(.renewed)))
                }
            case .inGracePeriod:
                enterHold(atMs: due, &events)
            case .onHold:
                state = .expired
                autoRenewing = false
                holdUntilMs = nil
                cancellation = .system
                cancelTimeMs = due
                events.append((due, .subscription(.canceled)))
                events.append((due, .subscription(.expired)))
            case .paused:
                state = .active
                pausedUntilMs = nil
                renewals += 1
                expiryTimeMs = due + periodMs
                events.append((due, .subscription(.recovered)))
            case .expired:
                return events
            }
        }
        return events
    }

    private mutating func enterHold(atMs: Int64, _ events: inout [(Int64, PlayEvent)]) {
        guard accountHoldMs > 0 else {
            state = .expired
            autoRenewing = false
            cancellation = .system
            cancelTimeMs = atMs
            events.append((atMs, .subscription(.canceled)))
            events.append((atMs, .subscription(.expired)))
            return
        }
        state = .onHold
        expiryTimeMs = atMs
        holdUntilMs = atMs + accountHoldMs
        events.append((atMs, .subscription(.onHold)))
    }

    /// Refunds and revokes at once: a one-time purchase is canceled, a subscription ends now and stops recurring.
    mutating func revoke(
        atMs: Int64, source: PlayVoidedSource, reason: PlayVoidedReason, cancellation: PlayCancellation
    ) -> [(atMs: Int64, event: PlayEvent)] {
        let order = latestOrderId
        refundableQuantity = 0
        if kind == .product {
            canceled = true
            return [(atMs, .voided(orderId: order, source: source, reason: reason, quantity: nil))]
        }
        state = .expired
        autoRenewing = false
        expiryTimeMs = min(expiryTimeMs, atMs)
        self.cancellation = cancellation
        cancelTimeMs = atMs
        holdUntilMs = nil
        pausedUntilMs = nil
        pendingPauseMs = nil
        return [(atMs, .subscription(.revoked)), (atMs, .voided(orderId: order, source: source, reason: reason, quantity: nil))]
    }
}

/// VoidedPurchase.voidedSource.
enum PlayVoidedSource: Int, Codable, Sendable {
    case user = 0, developer = 1, google = 2

    init(_ given: PlayVoidSource) {
        switch given {
        case .user: self = .user
        case .developer: self = .developer
        case .google: self = .google
        }
    }
}

/// VoidedPurchase.voidedReason.
enum PlayVoidedReason: Int, Codable, Sendable {
    case other = 0, remorse, notReceived, defective, accidentalPurchase, fraud, friendlyFraud, chargeback, unacknowledgedPurchase

    init(_ given: PlayVoidReason) {
        switch given {
        case .other: self = .other
        case .remorse: self = .remorse
        case .notReceived: self = .notReceived
        case .defective: self = .defective
        case .accidentalPurchase: self = .accidentalPurchase
        case .fraud: self = .fraud
        case .friendlyFraud: self = .friendlyFraud
        case .chargeback: self = .chargeback
        }
    }
}
