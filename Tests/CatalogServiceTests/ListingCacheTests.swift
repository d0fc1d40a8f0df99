import CatalogService
import Foundation
import IAPProtocol
import JSONRPC
import RPCTestSupport
import RPCTransport
import Testing

/// Caller-chosen strings never become unbounded cache keys (docs/security.md): a locale is normalized
/// to one of the catalog's own before it keys a listing, and the listing cache has a bound.
@Suite struct ListingCacheTests {
    @Test func tenThousandDistinctLocalesKeepTheListingCacheBounded() async throws {
        let f = try await CatalogFixture.start()
        defer { Task { await f.stop() } }
        let known = Set(CatalogFixture.standardCatalog.flatMap { $0.localizations.keys })
        for i in 0..<10_000 {
            // Valid, distinct, and unknown to the catalog: zz-A0 ... zz-A9999, plus variants of known languages.
            let locale = i.isMultiple(of: 2) ? "zz-a\(i)" : "de-x\(i)"
            _ = try await f.service.listProducts(.init(storefront: "USA", locale: locale))
        }
        // One listing for "no known locale" and one per known locale reached (de-* -> de-DE).
        #expect(f.service.cachedListingCount <= known.count + 1, "\(f.service.cachedListingCount) listings cached")
        // An unknown regional variant is served in its language; an unknown language in the default.
        for locale in ["de-AT", "de-de"] {
            let listing = try JSONValue.parse(
                String(
                    decoding: try await f.service.listProducts(.init(storefront: "USA", locale: locale)),
                    as: UTF8.self))
            let coins = listing["products"]?.arrayValue?.first { $0["productId"]?.stringValue == "coins.100" }
            #expect(coins?["title"]?.stringValue == "100 Münzen", "\(locale)")
        }
    }

    @Test func theListingCacheHasAHardBoundEvenForKnownKeys() async throws {
        let f = try await CatalogFixture.start(configure: { $0.maxCachedListings = 3 })
        defer { Task { await f.stop() } }
        for storefront in ["USA", "DEU", "JPN", "FRA", "GBR", "CAN", "AUS"] {
            _ = try await f.service.listProducts(.init(storefront: storefront))
            #expect(f.service.cachedListingCount <= 3)
        }
    }
}
