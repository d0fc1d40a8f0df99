import IAPProtocol

/// A consumption answer owed to Apple (the outbox's payload): the request, and the end of Apple's window for it (12 hours
/// after Apple signed its CONSUMPTION_REQUEST), after which it is not sent.
public struct OwedConsumptionAnswer: Codable, Sendable, Equatable {
    public var request: AppleConsumptionRequest
    public var deadlineMs: Int64
    public init(request: AppleConsumptionRequest, deadlineMs: Int64) {
        self.request = request
        self.deadlineMs = deadlineMs
    }
}

/// What this server tells Apple about a purchase whose refund the customer asked for (Send Consumption Information v2,
/// answering CONSUMPTION_REQUEST), decided from the ledger alone: delivered, and how much of it was consumed, in Apple's
/// milliunits (100000: all of it).
public enum ConsumptionRules {
    /// How the purchase could be used, as this server recorded it.
    public enum Use: Sendable, Equatable {
        /// Coins: the purchase's grant and the wallet's balance now.
        case coins(granted: Int64, balance: Int64)
        /// An unlock with downloadable content: the product's content ids and those the account was given a download of.
        case content(contentIds: [String], delivered: Set<String>)
        /// A non-renewing subscription: its period and now.
        case period(startMs: Int64, durationMs: Int64, nowMs: Int64)
        /// An auto-renewable subscription: Apple takes no percentage for it.
        case autoRenewable
    }

    /// Milliunits consumed; nil for an auto-renewable subscription (Apple refuses a percentage for it).
    /// Coins: the balance is counted as this purchase's first (the most the customer can still hold of it), so what is
    /// gone of the grant beyond the balance was spent. Content: the share of its files downloaded; an unlock with none
    /// is delivered whole when granted. A period: the share elapsed.
    public static func percentage(_ use: Use) -> Int? {
        switch use {
        case .coins(let granted, let balance):
            guard granted > 0 else { return 100_000 }
            let left = min(max(balance, 0), granted)
            return Int((granted - left) * 100_000 / granted)
        case .content(let ids, let delivered):
            let all = Set(ids)
            guard !all.isEmpty else { return 100_000 }
            return all.intersection(delivered).count * 100_000 / all.count
        case .period(let start, let duration, let now):
            guard duration > 0 else { return 100_000 }
            return Int(min(max(now - start, 0), duration) * 100_000 / duration)
        case .autoRenewable:
            return nil
        }
    }

    /// The answer for a purchase granted here: delivered, with the share consumed. One taken back here (an
    /// administrator's revocation) is no longer delivered: `UNDELIVERED_OTHER`, 0 consumed.
    public static func request(_ use: Use, revoked: Bool) -> AppleConsumptionRequest {
        let percentage = percentage(use)
        return AppleConsumptionRequest(
            customerConsented: true, deliveryStatus: revoked ? .undeliveredOther : .delivered, sampleContentProvided: false,
            consumptionPercentage: revoked ? percentage.map { _ in 0 } : percentage)
    }
}
