/// The `error.data.reason` values a caller acts on, across a service boundary or from the transport: the
/// contract between the side that sets a reason and the side that matches it, so neither spells it alone.
/// Each has a test on both sides.
public enum RPCErrorReason: String, Sendable, CaseIterable {
    /// Verification has no App Store Server API key: Apple cannot be asked (not retryable by waiting).
    /// Fulfillment then applies a notification from its own signed snapshot.
    case appStoreAPINotConfigured
    /// Verification has no Google Play service account (`--play-service-account`): Google cannot be asked.
    case playAPINotConfigured
    /// A service behind the one answering could not answer; nothing was changed (retryable).
    case dependencyUnavailable
    /// The transport could not connect to the address.
    case connectFailed
    /// The connection closed or failed with the call in flight.
    case connectionLost
    /// A username and password (or current password) that do not match.
    case invalidCredentials
    /// An admin method called without the right admin token.
    case adminTokenRequired
    /// An internal method called without the right internal token.
    case internalTokenRequired
    /// Content asked for with Sandbox entitlements on a server without `--sandbox-content`.
    case sandboxContentDisabled
}

extension RPCError {
    /// True when this error carries `reason`.
    public func has(_ reason: RPCErrorReason) -> Bool { data.reason == reason.rawValue }

    public init(code: RPCErrorCode, message: String, reason: RPCErrorReason, retryable: Bool = false) {
        self.init(code: code, message: message, reason: reason.rawValue, retryable: retryable)
    }
}
