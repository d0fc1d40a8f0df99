import JSONRPC

// The App Store simulator's side of Apple's Retention Messaging: where it sends an app's realtime requests, and a customer
// about to cancel (`sim.cancelIntent`).

/// Sets (or clears) the URL the simulator sends an environment's Get Retention Message requests to (Apple's
/// Configure Realtime URL: https, at most 256 characters; the simulator also takes http to this machine, for tests).
public enum SimSetRealtimeURL: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var environment: SimEnvironment
        public var url: String?
        public init(environment: SimEnvironment, url: String? = nil) {
            self.environment = environment
            self.url = url
        }
    }
    public typealias Result = EmptyResult
    public static let name = "sim.setRealtimeURL"
    public static let summary = "Set (or clear) the URL of an environment's realtime retention requests (Apple's Configure Realtime URL)."
}

/// What the customer who looked at cancelling was shown.
public struct RetentionShown: Codable, Sendable, Equatable {
    /// `message`, `alternateProduct`, `promotionalOffer`, or `default` (no URL, no answer in time, or an answer that is
    /// not exactly one valid choice: Apple then shows the default message configured for the product and locale).
    public var kind: String
    public var messageIdentifier: String?
    /// `alternateProduct`: the product offered instead.
    public var productId: String?
    /// `promotionalOffer`: the offer's identifier, from its signature (v1 object or v2 JWS).
    public var offerIdentifier: String?
    /// Why the default was shown, when it was.
    public var reason: String?
    public init(
        kind: String, messageIdentifier: String? = nil, productId: String? = nil, offerIdentifier: String? = nil, reason: String? = nil
    ) {
        self.kind = kind
        self.messageIdentifier = messageIdentifier
        self.productId = productId
        self.offerIdentifier = offerIdentifier
        self.reason = reason
    }
}

/// A customer opens the cancellation sheet of a subscription: the simulator sends the app's server a signed
/// `RealtimeRequestBody` (as Apple's Get Retention Message request) and answers what the customer was shown.
public enum SimCancelIntent: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        public var appleId: String
        /// The subscription's original transaction id.
        public var originalTransactionId: String
        /// The device's locale, e.g. `en-US`.
        public var locale: String
        /// The app Apple ID the request names (default the simulated app's, 1234567890): another app's, to see it refused.
        public var appAppleId: Int64?
        public init(appleId: String, originalTransactionId: String, locale: String, appAppleId: Int64? = nil) {
            self.appleId = appleId
            self.originalTransactionId = originalTransactionId
            self.locale = locale
            self.appAppleId = appAppleId
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        public var requestIdentifier: String
        /// The signed request as sent (`RealtimeRequestBody.signedPayload`).
        public var signedPayload: String
        public var shown: RetentionShown
        public init(requestIdentifier: String, signedPayload: String, shown: RetentionShown) {
            self.requestIdentifier = requestIdentifier
            self.signedPayload = signedPayload
            self.shown = shown
        }
    }
    public static let name = "sim.cancelIntent"
    public static let summary = "A customer looks at cancelling: send the app's realtime retention request and answer what was shown."
}

/// Apple's review of an uploaded retention message or image: the simulator keeps both `PENDING` until this sets
/// `APPROVED` or `REJECTED` (Apple shows, and takes as a default, only approved messages with approved images).
public enum SimReviewMessaging: RPCMethod {
    public struct Params: Codable, Sendable, Equatable {
        /// A message's or an image's identifier (a UUID).
        public var identifier: String
        /// `APPROVED`, `REJECTED` or `PENDING`.
        public var state: String
        public init(identifier: String, state: String) {
            self.identifier = identifier
            self.state = state
        }
    }
    public struct Result: Codable, Sendable, Equatable {
        /// Messages and images given the state (one app and environment each).
        public var reviewed: Int
        public init(reviewed: Int) { self.reviewed = reviewed }
    }
    public static let name = "sim.reviewMessaging"
    public static let summary = "Approve or reject an uploaded retention message or image (Apple's review)."
}
