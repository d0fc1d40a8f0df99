import NIOCore
import NIOSSL

/// TLS on a service's JSON-RPC listener, so the internal token and session tokens are never readable on a network
/// between machines. With a client CA the server also asks for a client certificate and accepts only those that
/// chain to it (mutual TLS: only the suite's own services may connect).
public struct RPCServerTLS: Sendable {
    let context: NIOSSLContext
    public let requiresClientCertificate: Bool

    /// PEM files: this server's certificate chain and private key (read once, never logged); `clientCAFile`: the
    /// roots client certificates must chain to, which makes a client certificate required.
    public init(certificateFile: String, keyFile: String, clientCAFile: String? = nil) throws {
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificateFile).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: keyFile, format: .pem)))
        configuration.minimumTLSVersion = .tlsv12
        if let clientCAFile {
            // The client is identified by its certificate's chain, not by a host name.
            configuration.certificateVerification = .noHostnameVerification
            configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(clientCAFile))
        }
        self.context = try NIOSSLContext(configuration: configuration)
        self.requiresClientCertificate = clientCAFile != nil
    }

    func handler() -> NIOSSLServerHandler { NIOSSLServerHandler(context: context) }
}

/// TLS on the connections a client opens: the server's certificate must chain to the given roots and name the host
/// dialled (its DNS name, or its IP address for an address), and the client presents its own certificate when
/// given one (for servers that require it).
public struct RPCClientTLS: Sendable {
    let context: NIOSSLContext

    /// `caFile`: PEM roots the servers' certificates must chain to; `certificateFile` and `keyFile`: this client's
    /// certificate and key (PEM), both or neither.
    public init(caFile: String, certificateFile: String? = nil, keyFile: String? = nil) throws {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(caFile))
        if let certificateFile, let keyFile {
            configuration.certificateChain = try NIOSSLCertificate.fromPEMFile(certificateFile).map { .certificate($0) }
            configuration.privateKey = .privateKey(try NIOSSLPrivateKey(file: keyFile, format: .pem))
        }
        self.context = try NIOSSLContext(configuration: configuration)
    }

    /// The handler for a connection to `host`: SNI and name checks for a DNS name; for an IP address no SNI (it
    /// cannot carry one) and the certificate is checked against the address connected to.
    func handler(host: String) throws -> NIOSSLClientHandler {
        let isAddress = (try? SocketAddress(ipAddress: host, port: 0)) != nil
        return try NIOSSLClientHandler(context: context, serverHostname: isAddress ? nil : host)
    }
}
