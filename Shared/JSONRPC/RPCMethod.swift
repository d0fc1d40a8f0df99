/// A method of the wire contract: its name and its parameter and result types, declared once and
/// shared by the server that implements it, every client that calls it and the CLI. A renamed field
/// is a compile error on both sides instead of a silent mismatch.
public protocol RPCMethod: Sendable {
    associatedtype Params: Codable & Sendable
    associatedtype Result: Codable & Sendable
    /// The wire name, e.g. `accounts.login`.
    static var name: String { get }
    /// One line for `rpc.discover` and `iap methods`.
    static var summary: String { get }
    /// Who may call it; documented in `rpc.discover`, enforced by the service.
    static var access: RPCAccess { get }
}

extension RPCMethod {
    public static var access: RPCAccess { .public }
}

public enum RPCAccess: String, Sendable, Codable {
    /// Any caller (account-scoped methods still check the session).
    case `public`
    /// Needs the admin token (`adminToken` param).
    case admin
    /// Service-to-service only: needs the suite's internal token.
    case `internal`
}

/// Params of a method that takes none. Accepts `{}` or absent params.
public struct EmptyParams: Codable, Sendable, Equatable {
    public init() {}
}

/// The result `{}`.
public struct EmptyResult: Codable, Sendable, Equatable {
    public init() {}
}
