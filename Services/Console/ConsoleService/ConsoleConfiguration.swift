import AccountsService
import Foundation
import ServiceSupport

/// What the console needs to run: the tokens it calls the services with, how its cookies are marked, how long sessions
/// live, and the sign-in limits (accounts' own policy).
public struct ConsoleConfiguration: Sendable {
    /// fulfillment's admin methods (customer reads, actions, the audit log).
    public var adminToken: String
    /// accounts' internal methods (who a customer is).
    public var internalToken: String
    /// `Secure` on cookies: whenever the console serves TLS.
    public var secureCookies = false
    /// A session ends after this long without a request...
    public var sessionIdleMs: Int64 = 30 * 60 * 1000
    /// ...and this long after sign-in, whatever happens.
    public var sessionAbsoluteMs: Int64 = 12 * 60 * 60 * 1000
    public var throttle = LoginThrottlePolicy()
    public var clock: ServiceClock = .system
    /// Largest form body read.
    public var maxFormBytes = 16 * 1024

    public init(adminToken: String, internalToken: String) {
        self.adminToken = adminToken
        self.internalToken = internalToken
    }

    /// Plain HTTP is for loopback only: anywhere else the console's cookies and passwords would cross a network in clear.
    public static func checkBind(host: String, tls: Bool) throws {
        guard tls || Loopback.contains(host) else { throw PlainHTTPRefused(host: host) }
    }

    public struct PlainHTTPRefused: Error, CustomStringConvertible {
        public let host: String
        public var description: String {
            "\(host) is not a loopback address and the console would serve plain HTTP: give --tls-cert and --tls-key, or bind 127.0.0.1"
        }
    }
}
