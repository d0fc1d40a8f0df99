import AppStoreServerAPI
import AppStoreSimulator
import Foundation
import IAPProtocol
import JSONRPC
import Testing

/// Retention Messaging's management endpoints over real HTTP, through the shared client and the simulator: images and
/// messages with Apple's limits and review states, default messages only when approved, the realtime URL, Apple's codes.
@Suite struct AppStoreServerAPIRetentionTests {
    typealias API = AppStoreServerAPITests

    /// A PNG as Apple takes it: signature, IHDR (8-bit, `colorType` 0 grey or 6 with alpha), one IDAT of stored deflate
    /// blocks, IEND, each chunk with its CRC.
    static func png(width: Int, height: Int, colorType: UInt8 = 0) -> [UInt8] {
        func be32(_ v: Int) -> [UInt8] { [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: v >> $0) } }
        func crc(_ bytes: [UInt8]) -> UInt32 {
            var c: UInt32 = 0xFFFF_FFFF
            for b in bytes {
                c ^= UInt32(b)
                for _ in 0..<8 { c = c & 1 == 1 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
            }
            return ~c
        }
        func chunk(_ type: String, _ data: [UInt8]) -> [UInt8] {
            let body = Array(type.utf8) + data
            return be32(data.count) + body + be32(Int(crc(body)))
        }
        let channels = colorType == 6 ? 4 : 1
        let raw = [UInt8](repeating: 0, count: (width * channels + 1) * height)
        var deflate: [UInt8] = [0x78, 0x01]
        var at = 0
        while at < raw.count {
            let n = min(65_535, raw.count - at)
            deflate += [at + n == raw.count ? 1 : 0, UInt8(n & 0xFF), UInt8(n >> 8), UInt8(~n & 0xFF), UInt8((~n >> 8) & 0xFF)]
            deflate += raw[at..<(at + n)]
            at += n
        }
        var a: UInt32 = 1, b: UInt32 = 0
        for byte in raw {
            a = (a + UInt32(byte)) % 65_521
            b = (b + a) % 65_521
        }
        deflate += be32(Int(b << 16 | a))
        return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + chunk("IHDR", be32(width) + be32(height) + [8, colorType, 0, 0, 0])
            + chunk("IDAT", deflate) + chunk("IEND", [])
    }

    static func code(_ call: () async throws -> Void) async -> Int? {
        do {
            try await call()
            return nil
        } catch AppStoreAPIError.api(_, let code, _) {
            return code
        } catch { return -1 }
    }

    @Test func imagesMessagesAndDefaultsKeepApplesLimitsAndReviewStates() async throws {
        try await API.serve { served in
            let client = try served.client()
            _ = try await API.buy(served.simulator, "sub.premium", .autoRenewable)  // the simulated App Store knows the app by its sales
            let image = UUID().uuidString.lowercased(), message = UUID().uuidString.lowercased()
            try await client.uploadImage(.production, imageIdentifier: image, png: Self.png(width: 3840, height: 160))
            #expect(try await client.imageList(.production) == [RetentionAsset(identifier: image, state: "PENDING", imageSize: "FULL_SIZE")])
            #expect(try await client.imageList(.sandbox).isEmpty, "each environment has its own")
            let other = UUID().uuidString
            #expect(
                await Self.code { try await client.uploadImage(.production, imageIdentifier: image, png: Self.png(width: 3840, height: 160)) }
                    == 4_090_000)
            #expect(
                await Self.code {
                    try await client.uploadImage(.production, imageIdentifier: other, png: Self.png(width: 3840, height: 160, colorType: 6))
                }
                    == 4_000_161)
            #expect(
                await Self.code { try await client.uploadImage(.production, imageIdentifier: other, png: Self.png(width: 1000, height: 160)) }
                    == 4_000_161)
            #expect(
                await Self.code {
                    try await client.uploadImage(.production, imageIdentifier: other, png: Self.png(width: 8, height: 8), imageSize: "HUGE")
                }
                    == 4_000_216)

            let long = String(repeating: "x", count: 67)
            func upload(_ m: RetentionMessageUpload, _ id: String = UUID().uuidString) async -> Int? {
                await Self.code { try await client.uploadMessage(.production, messageIdentifier: id, message: m) }
            }
            #expect(await upload(.init(header: long, body: "b")) == 4_000_162)
            #expect(await upload(.init(header: "h", body: String(repeating: "y", count: 145))) == 4_000_163)
            #expect(await upload(.init(header: "h", body: "b", headerPosition: "ABOVE_IMAGE")) == 4_000_224)
            let bullet = RetentionMessageUpload.BulletPoint(text: "t", imageIdentifier: image, altText: "a")
            #expect(await upload(.init(header: "h", body: "b", bulletPoints: Array(repeating: bullet, count: 6))) == 4_000_218)
            #expect(await upload(.init(header: "h", body: "b", image: .init(imageIdentifier: UUID().uuidString, altText: "a"))) == 4_040_014)
            #expect(
                await upload(.init(header: "h", body: "b", image: .init(imageIdentifier: image, altText: String(repeating: "z", count: 151))))
                    == 4_000_175)
            let stay = RetentionMessageUpload(
                header: "Stay with us", body: "Keep your castle and your coins.", image: .init(imageIdentifier: image, altText: "A castle"),
                headerPosition: "ABOVE_IMAGE")
            #expect(await upload(stay, message) == nil)
            #expect(await upload(stay, message) == 4_090_001)
            #expect(try await client.messageList(.production) == [RetentionAsset(identifier: message, state: "PENDING")])

            // Defaults: only an approved message, with its images approved (Apple's review is sim.reviewMessaging here).
            func setDefault(_ locale: String = "en-US") async -> Int? {
                await Self.code {
                    try await client.configureDefaultMessage(.production, productId: "sub.premium", locale: locale, messageIdentifier: message)
                }
            }
            #expect(await setDefault() == 4_030_017)
            _ = try await served.simulator.reviewMessaging(.init(identifier: message, state: "APPROVED"))
            #expect(await setDefault() == 4_030_018)
            _ = try await served.simulator.reviewMessaging(.init(identifier: image, state: "APPROVED"))
            #expect(await setDefault("english") == 4_000_164)
            #expect(await setDefault() == nil)
            #expect(try await client.defaultMessage(.production, productId: "sub.premium", locale: "en-US") == message)
            #expect(await Self.code { try await client.deleteImage(.production, imageIdentifier: image) } == 4_030_019)
            try await client.deleteDefaultMessage(.production, productId: "sub.premium", locale: "en-US")
            #expect(await Self.code { _ = try await client.defaultMessage(.production, productId: "sub.premium", locale: "en-US") } == 4_040_020)
            try await client.deleteMessage(.production, messageIdentifier: message)
            #expect(await Self.code { try await client.deleteMessage(.production, messageIdentifier: message) } == 4_040_015)
            try await client.deleteImage(.production, imageIdentifier: image)
            #expect(try await client.imageList(.production).isEmpty)
        }
    }

    @Test func theRealtimeURLIsHTTPSAndProductionWaitsForAPassedPerformanceTest() async throws {
        try await API.serve { served in
            let client = try served.client()
            let production = try await API.buy(served.simulator, "sub.premium", .autoRenewable)
            #expect(await Self.code { _ = try await client.realtimeURL(.sandbox) } == 4_040_021)
            #expect(await Self.code { try await client.configureRealtimeURL(.sandbox, url: "ftp://example.com/x") } == 4_000_215)
            #expect(await Self.code { try await client.configureRealtimeURL(.sandbox, url: "http://example.com/x") } == 4_000_215)
            #expect(
                await Self.code { try await client.configureRealtimeURL(.sandbox, url: "https://example.com/" + String(repeating: "a", count: 240)) }
                    == 4_000_215)
            #expect(await Self.code { try await client.configureRealtimeURL(.production, url: "https://example.com/retention") } == 4_030_026)
            try await client.configureRealtimeURL(.sandbox, url: "https://example.com/retention")
            #expect(try await client.realtimeURL(.sandbox) == "https://example.com/retention")
            #expect(await Self.code { _ = try await client.performanceTestResult(requestId: "nope") } == 4_000_212)
            #expect(await Self.code { _ = try await client.performanceTestResult(requestId: UUID().uuidString) } == 4_040_018)
            #expect(
                await Self.code { _ = try await client.initiatePerformanceTest(originalTransactionId: production.originalTransactionId) } == 4_000_211
            )
            try await client.deleteRealtimeURL(.sandbox)
            #expect(await Self.code { try await client.deleteRealtimeURL(.sandbox) } == 4_040_021)
        }
    }
}
