import Foundation
import NIOSSL
import PostgresNIO

/// `postgres://user:password@host:port/database?sslmode=disable|prefer|require` (also `postgresql://`), the form
/// `psql` and libpq take. `--database-url` and `IAP_DATABASE_URL` carry it; the password never reaches a log
/// (`redacted`).
public struct PostgresURL: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var username: String
    public var password: String?
    public var database: String
    public var sslMode: SSLMode

    public enum SSLMode: String, Sendable { case disable, prefer, require }

    public struct Invalid: Error, CustomStringConvertible {
        public let description: String
    }

    public init(host: String, port: Int = 5432, username: String, password: String? = nil, database: String, sslMode: SSLMode = .disable) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
        self.sslMode = sslMode
    }

    public init(_ string: String) throws {
        guard let url = URLComponents(string: string), let scheme = url.scheme, ["postgres", "postgresql"].contains(scheme) else {
            throw Invalid(description: "a database URL looks like postgres://user:password@host:5432/database")
        }
        guard let host = url.host, !host.isEmpty else { throw Invalid(description: "the database URL names no host") }
        guard let user = url.user, !user.isEmpty else { throw Invalid(description: "the database URL names no user") }
        let database = String(url.path.drop { $0 == "/" })
        guard !database.isEmpty, !database.contains("/") else { throw Invalid(description: "the database URL names no database") }
        self.host = host
        self.port = url.port ?? 5432
        self.username = user.removingPercentEncoding ?? user
        self.password = url.password.map { $0.removingPercentEncoding ?? $0 }
        self.database = database.removingPercentEncoding ?? database
        self.sslMode = .disable
        for item in url.queryItems ?? [] where item.name == "sslmode" {
            guard let mode = SSLMode(rawValue: item.value ?? "") else {
                throw Invalid(description: "sslmode must be disable, prefer or require")
            }
            sslMode = mode
        }
    }

    /// The URL with the password left out: what logs and errors show.
    public var redacted: String { "postgres://\(username)\(password == nil ? "" : ":***")@\(host):\(port)/\(database)" }
    public var description: String { redacted }

    func configuration() throws -> PostgresConnection.Configuration {
        let tls: PostgresConnection.Configuration.TLS
        switch sslMode {
        case .disable: tls = .disable
        case .prefer: tls = .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
        case .require: tls = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
        }
        var configuration = PostgresConnection.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tls)
        configuration.options.connectTimeout = .seconds(5)
        return configuration
    }
}
