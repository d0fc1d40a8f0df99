import Crypto
import Foundation
import JSONRPC
import NIOCore
import RPCTestSupport
import RPCTransport
import SwiftASN1
import Testing
import X509

/// A certificate authority made here, and certificates it signs, as PEM files in a new directory.
struct TestCA {
    let directory: URL
    let key = P256.Signing.PrivateKey()
    let name: DistinguishedName
    var caFile: String { directory.appendingPathComponent("ca.pem").path }

    init(_ commonName: String) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("rpc-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        name = try DistinguishedName { CommonName(commonName) }
        let ca = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(key.publicKey), notValidBefore: Date().addingTimeInterval(-3600),
            notValidAfter: Date().addingTimeInterval(3600), issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                KeyUsage(keyCertSign: true)
            }, issuerPrivateKey: .init(key))
        try ca.serializeAsPEM().pemString.write(toFile: caFile, atomically: true, encoding: .utf8)
    }

    /// A leaf for 127.0.0.1 (server and client use): answers (certificate file, key file).
    func issue(_ label: String) throws -> (cert: String, key: String) {
        let leafKey = P256.Signing.PrivateKey()
        let subject = try DistinguishedName { CommonName(label) }
        let leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(leafKey.publicKey), notValidBefore: Date().addingTimeInterval(-3600),
            notValidAfter: Date().addingTimeInterval(3600), issuer: name, subject: subject, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                SubjectAlternativeNames([.ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1])), .dnsName("localhost")])
                try ExtendedKeyUsage([.serverAuth, .clientAuth])
            }, issuerPrivateKey: .init(key))
        let cert = directory.appendingPathComponent("\(label).pem").path
        let keyFile = directory.appendingPathComponent("\(label)-key.pem").path
        try leaf.serializeAsPEM().pemString.write(toFile: cert, atomically: true, encoding: .utf8)
        try leafKey.pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)
        return (cert, keyFile)
    }
}

/// The internal JSON-RPC over TLS: a client that trusts the suite's CA talks to a TLS listener; a plaintext client,
/// a client trusting another CA, or (with mutual TLS) a client without a certificate gets nothing.
@Suite struct TLSTransportTests {
    static func server(_ tls: RPCServerTLS) async throws -> RPCServer {
        try await TestServer.start(configure: { $0.tls = tls })
    }

    @Test func aClientTrustingTheCACallsATLSListener() async throws {
        let ca = try TestCA("suite CA")
        let leaf = try ca.issue("accounts")
        let server = try await Self.server(try RPCServerTLS(certificateFile: leaf.cert, keyFile: leaf.key))
        defer { Task { await server.shutdown() } }
        let client = RPCClient(
            host: "127.0.0.1", port: server.localPort!, configuration: .init(tls: try RPCClientTLS(caFile: ca.caFile)))
        defer { Task { await client.close() } }
        #expect(try await client.call(Echo.self, ["token": "internal-secret"]) == ["token": "internal-secret"])

        // Plaintext JSON-RPC to the TLS port is not answered: the listener only speaks TLS.
        let plain = try await LineClient.connect(port: server.localPort!)
        try await plain.send(line: #"{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}"#)
        let reply = try await plain.next()
        if case .line(let line) = reply { #expect(!line.contains(#""result""#), "a plaintext call was answered: \(line)") }
        await plain.close()
    }

    @Test func aServerWhoseCertificateChainsElsewhereIsRefused() async throws {
        let suiteCA = try TestCA("suite CA")
        let otherCA = try TestCA("someone else")
        let impostor = try otherCA.issue("impostor")
        let server = try await Self.server(try RPCServerTLS(certificateFile: impostor.cert, keyFile: impostor.key))
        defer { Task { await server.shutdown() } }
        let client = RPCClient(
            host: "127.0.0.1", port: server.localPort!,
            configuration: .init(callTimeout: .seconds(30), tls: try RPCClientTLS(caFile: suiteCA.caFile)))
        defer { Task { await client.close() } }
        let error = await rpcError { try await client.call(Echo.self, ["token": "internal-secret"]) }
        #expect(error?.knownCode == .unavailable, "the call must not be sent to a server the client cannot trust")
    }

    @Test func mutualTLSAcceptsOnlyClientsWithTheSuitesCertificates() async throws {
        let ca = try TestCA("suite CA")
        let leaf = try ca.issue("fulfillment")
        let client1 = try ca.issue("edge")
        let stranger = try TestCA("stranger").issue("stranger")
        let server = try await Self.server(try RPCServerTLS(certificateFile: leaf.cert, keyFile: leaf.key, clientCAFile: ca.caFile))
        defer { Task { await server.shutdown() } }
        func call(_ tls: RPCClientTLS) async -> RPCError? {
            let client = RPCClient(host: "127.0.0.1", port: server.localPort!, configuration: .init(callTimeout: .seconds(30), tls: tls))
            defer { Task { await client.close() } }
            return await rpcError { try await client.call(Echo.self, ["n": 1]) }
        }
        #expect(await call(try RPCClientTLS(caFile: ca.caFile, certificateFile: client1.cert, keyFile: client1.key)) == nil)
        #expect(await call(try RPCClientTLS(caFile: ca.caFile))?.knownCode == .unavailable, "no client certificate")
        #expect(
            await call(try RPCClientTLS(caFile: ca.caFile, certificateFile: stranger.cert, keyFile: stranger.key))?.knownCode == .unavailable,
            "a certificate from another CA")
    }
}
